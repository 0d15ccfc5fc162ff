-- fair release_many: token-checked release of one or more fair locks, decided one after the
-- other in the order given (the client batches the concurrent releases of one connection into
-- one call; on a Redis Cluster the caller groups them by hash slot). Each lock is decided
-- exactly as one release alone decides it: delete the holder key if it is ours, then wake exactly
-- the next live waiter (waiters whose queue lease ran out are dropped from the head first). No
-- herd: only that waiter's channel is published to.
-- The holder keys are read with one MGET and the released ones deleted with one DEL (while a
-- script runs Redis runs no other command and expires no key, so a key that held the caller's
-- token at the MGET still holds it at the DEL); a lock released earlier in the same call counts
-- as gone for a later release of it, as it would one call after the other. The server clock is
-- read once, and only when a released lock has waiters (a release nobody waits for needs none).
-- KEYS[3i-2]  lock i's holder key
-- KEYS[3i-1]  its queue (list of waiter tokens)
-- KEYS[3i]    its queue leases (sorted set: waiter token -> deadline, server ms)
-- ARGV[2i-1]  the owner token of lock i
-- ARGV[2i]    the prefix of lock i's waiters' wake-up channels
-- Returns     a flat array, two entries per lock, for lock i at 2i-1 and 2i:
--             1, next  released; next = the token of the waiter woken ('' when none waits)
--             0, ''    the key is gone: that lock had expired
--             -1, ''   the key holds another owner's token
--             -4, msg  released, but a Redis error (e.g. WRONGTYPE on a damaged queue) stopped
--                      the wake-up, as it would have stopped a lone call; the other locks of the
--                      batch are released and woken regardless
local n = #KEYS / 3
local values
if n == 1 then
  values = {redis.call('GET', KEYS[1])}
else
  local locks = {}
  for i = 1, n do
    locks[i] = KEYS[3 * i - 2]
  end
  values = redis.pcall('MGET', unpack(locks))
  if values.err then
    -- a user whose ACL predates dlm's use of MGET: one GET per key
    values = {}
    for i = 1, n do
      values[i] = redis.call('GET', locks[i])
    end
  end
end
local out, gone, seen = {}, {}, {}
for i = 1, n do
  local lock = KEYS[3 * i - 2]
  local v = values[i]
  if seen[lock] then v = false end
  if v == ARGV[2 * i - 1] then
    seen[lock] = true
    gone[#gone + 1] = lock
    out[2 * i - 1], out[2 * i] = 1, ''
  elseif v == false then
    out[2 * i - 1], out[2 * i] = 0, ''
  else
    out[2 * i - 1], out[2 * i] = -1, ''
  end
end
if #gone == 0 then
  return out
end
redis.call('DEL', unpack(gone))
local now
local function wake(i)
  local queue, timeouts = KEYS[3 * i - 1], KEYS[3 * i]
  for _ = 1, 1000 do
    local head = redis.call('LINDEX', queue, 0)
    if not head then break end
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local deadline = tonumber(redis.call('ZSCORE', timeouts, head))
    if deadline and deadline > now then
      redis.call('PUBLISH', ARGV[2 * i] .. head, '1')
      out[2 * i] = head
      break
    end
    redis.call('LPOP', queue)
    redis.call('ZREM', timeouts, head)
  end
end
for i = 1, n do
  if out[2 * i - 1] == 1 then
    local ok, err = pcall(wake, i)
    if not ok then
      if type(err) == 'table' then err = err.err end
      out[2 * i - 1], out[2 * i] = -4, tostring(err)
    end
  end
end
return out
