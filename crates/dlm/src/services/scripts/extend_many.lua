-- extend_many: a client's batched watchdog tick (and a single extend) for leases stored as
-- "key = owner token, PX = lease": the mutex, the fair lock. Extend each one only if it is still ours.
-- KEYS[i]      lock keys (on Redis Cluster the caller groups them by hash slot)
-- ARGV[2i-1]   the owner token of KEYS[i]
-- ARGV[2i]     the new TTL of KEYS[i] in milliseconds, from now
-- Returns      per key: 1 extended, 0 the key is gone (expired), -1 held by another token; or, in
--              place of the code, a string: the message of a Redis error on this key alone
--              (WRONGTYPE: it holds no string), raised before any write of it. The other keys are
--              extended regardless (each runs under pcall: a redis.call error would abort the
--              script, and the watchdog would renew none of the call's leases).
local out = {}
local function decide(i)
  local v = redis.call('GET', KEYS[i])
  if v == ARGV[2 * i - 1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i])
    out[i] = 1
  elseif v == false then
    out[i] = 0
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
