-- extend_or_acquire_many: a Redlock client's batched watchdog tick on one node. For each
-- lock: set its new TTL if it is still ours, or take it again if the key is gone (the node
-- restarted empty, or our key expired here while the majority still holds it for us).
-- KEYS[i]      lock keys (the caller groups them by hash slot on a possible cluster)
-- ARGV[2i-1]   the owner token of KEYS[i]
-- ARGV[2i]     the new TTL of KEYS[i] in milliseconds, counted from now
-- Returns      per key: 1 extended, 2 the key was gone and is ours again,
--              -1 the key holds another owner's token; or, in place of the code, a string:
--              the message of a Redis error on this key alone (WRONGTYPE: it holds no string),
--              raised before any write of it. The other keys are decided regardless (each runs
--              under pcall: a redis.call error would abort the script, and this node would
--              count as failed for every lock of the call).
local out = {}
local function decide(i)
  local v = redis.call('GET', KEYS[i])
  if v == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = 1
  elseif v == false then
    redis.call('SET', KEYS[i], ARGV[2 * i - 1], 'PX', ARGV[2 * i])
    out[i] = 2
  else
    out[i] = -1
  end
end
for i = 1, #KEYS do
  local ok, err = pcall(decide, i)
  if not ok then
    if type(err) == 'table' then err = err.err end
    out[i] = tostring(err)
  end
end
return out
