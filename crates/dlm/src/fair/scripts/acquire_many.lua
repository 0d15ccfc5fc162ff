-- fair acquire_many: one attempt each at one or more fair locks, decided one after the other in
-- the order given (the client batches the concurrent acquires of one connection into one call;
-- on a Redis Cluster the caller groups them by hash slot). Each lock is decided exactly as one
-- attempt alone decides it: take the lock if it is free and we are first in line (or nobody
-- waits); else queue up (once) and refresh our queue lease. Waiters whose queue lease ran out
-- are dropped from the head first, so a dead waiter stalls the line for at most its own lease.
-- Two things are shared by the batch, neither observable by a client:
--   * the server clock is read once, and only when some lock's queue is not empty (an
--     uncontended acquire needs no clock): the script runs atomically, so every lock is decided
--     at that one instant, as if each attempt had run alone at it;
--   * each fencing counter is raised once, by one INCRBY of the locks granted on it, after every
--     lock is decided: the granted locks take its new values in grant (= batch) order, all above
--     any fence handed out before this call and below any handed out after it, so the fence of
--     each lock still grows in grant order.
-- KEYS[4i-3]  lock i's holder key (value = owner token, PX = lease)
-- KEYS[4i-2]  its queue: a list of waiter tokens in arrival order
-- KEYS[4i-1]  its queue leases: a sorted set, waiter token -> deadline (server time, ms)
-- KEYS[4i]    the fencing counter of its hash slot
-- ARGV[4i-3]  the owner token of lock i's acquisition (also its waiter id)
-- ARGV[4i-2]  lock i's TTL in milliseconds
-- ARGV[4i-1]  the queue lease in milliseconds; 0 = try once, do not queue
-- ARGV[4i]    the prefix of lock i's waiters' wake-up channels (the channel is prefix .. token)
-- ARGV[#ARGV] the most waiters one queue may hold
-- Returns     a flat array, three entries per lock, for lock i at 3i-2 .. 3i:
--             1, fence, 0      acquired (also when a lost reply had granted it already: then its
--                              lease is reset to the TTL from now, with a fresh fence)
--             0, wait_ms, pos  not acquired; pos = our place in line (1 = next, 0 = not queued);
--                              wait_ms = the holder's PTTL (-1: no expiry), or, while the lock is
--                              free, how long until the first waiter's lease ends
--             -2, max, 0       the queue is full
--             -3, 0, 0         granted, but the fencing counter does not hold an integer (no fence;
--                              the client counts the attempt as failed and cancels it)
--             -4, message, 0   a Redis error (e.g. WRONGTYPE on a damaged key) while deciding this
--                              lock: its writes so far stay, as a lone call's would, and the other
--                              locks of the batch are decided regardless (a redis.call error would
--                              abort the whole script: every lock reported failed, earlier ones
--                              granted in Redis nonetheless)
local max = tonumber(ARGV[#ARGV])
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local out = {}
-- counter -> the locks granted on it, in grant order; counters in first-grant order
local granted, counters = {}, {}
local function grant(i, counter)
  local g = granted[counter]
  if not g then
    g = {}
    granted[counter] = g
    counters[#counters + 1] = counter
  end
  g[#g + 1] = i
  out[3 * i - 2], out[3 * i - 1], out[3 * i] = 1, 0, 0
end
local function decide(i)
  local lock, queue, timeouts = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1]
  local me, ttl, lease, wake = ARGV[4 * i - 3], ARGV[4 * i - 2], tonumber(ARGV[4 * i - 1]), ARGV[4 * i]
  local head = redis.call('LINDEX', queue, 0)
  local purged = false
  if head and head ~= me then
    -- drop the waiters whose queue lease ran out from the head
    local t = clock()
    for _ = 1, 1000 do
      local deadline = tonumber(redis.call('ZSCORE', timeouts, head))
      if deadline and deadline > t then break end
      redis.call('LPOP', queue)
      redis.call('ZREM', timeouts, head)
      purged = true
      head = redis.call('LINDEX', queue, 0)
      if not head or head == me then break end
    end
  end
  local holder
  local done = false
  if not head then
    -- nobody waits: the lock goes to whoever finds it free
    if redis.call('SET', lock, me, 'NX', 'PX', ttl) then
      grant(i, KEYS[4 * i])
      done = true
    else
      holder = redis.call('GET', lock)
    end
  else
    holder = redis.call('GET', lock)
    if not holder and head == me then
      redis.call('SET', lock, me, 'PX', ttl)
      redis.call('LPOP', queue)
      redis.call('ZREM', timeouts, me)
      grant(i, KEYS[4 * i])
      done = true
    end
  end
  if not done and holder == me then
    redis.call('PEXPIRE', lock, ttl)
    grant(i, KEYS[4 * i])
    done = true
  end
  if not done then
    -- busy: somebody holds it, or it is free but another waiter is first in line (head ~= me)
    if purged and not holder then
      redis.call('PUBLISH', wake .. head, '1')
    end
    local wait
    if holder then
      wait = redis.call('PTTL', lock)
    else
      wait = math.max(0, (tonumber(redis.call('ZSCORE', timeouts, head)) or clock()) - clock())
    end
    if lease == 0 then
      out[3 * i - 2], out[3 * i - 1], out[3 * i] = 0, wait, 0
    else
      local pos, len = false, 0
      if head then
        pos = redis.call('LPOS', queue, me)
        if not pos then len = redis.call('LLEN', queue) end
      end
      if not pos and len >= max then
        out[3 * i - 2], out[3 * i - 1], out[3 * i] = -2, max, 0
      else
        if not pos then
          redis.call('RPUSH', queue, me)
          pos = len
        end
        redis.call('ZADD', timeouts, clock() + lease, me)
        if redis.call('PTTL', queue) < lease then redis.call('PEXPIRE', queue, lease) end
        if redis.call('PTTL', timeouts) < lease then redis.call('PEXPIRE', timeouts, lease) end
        out[3 * i - 2], out[3 * i - 1], out[3 * i] = 0, wait, pos + 1
      end
    end
  end
end
for i = 1, (#ARGV - 1) / 4 do
  -- grant(i) is the last step of a grant: an error is never raised after it
  local ok, err = pcall(decide, i)
  if not ok then
    if type(err) == 'table' then err = err.err end
    out[3 * i - 2], out[3 * i - 1], out[3 * i] = -4, tostring(err), 0
  end
end
for _, counter in ipairs(counters) do
  local g = granted[counter]
  local top = redis.pcall('INCRBY', counter, #g)
  for k, i in ipairs(g) do
    if type(top) == 'table' then
      out[3 * i - 2] = -3
    else
      out[3 * i - 1] = top - #g + k
    end
  end
end
return out
