-- nack: a task failed; retry it after a delay, or move it to the dead set once
-- it has had max attempts. Only with the current lease.
-- KEYS (every queue script gets the same thirty-one, all sharing the {queue} hash tag):
--   1 waiting   ZSET  id -> due time (ms, server clock)
--   2 payload   HASH  id -> payload over 64 bytes (small ones: buckets, see payload.lua)
--   3 inflight  ZSET  id -> lease deadline (ms, server clock)
--   4 lease     HASH  id -> fencing token of the current lease
--   5 attempts  HASH  id -> times claimed
--   6 dead      ZSET  id -> time it died (ms)
--   7 errors    HASH  id -> last error text
--   8 fence     STRING  lease fencing counter (INCR)
--   9 stats     HASH  processed, failed, small (payloads kept in buckets)
--  10 signal    LIST  wake-up markers for idle workers (at most 64)
--  11 config    HASH  group_concurrency, rate_n, rate_period_ms, keep_completed
--  12 prio      HASH  id -> priority (only tasks with one other than 0)
--  13 group     HASH  id -> group (only tasks with a group)
--  14 ready     ZSET  id -> -priority * 2^42 + due time: due tasks, claim order
--                     (exists only while the queue has tasks with a priority or group)
--  15 gcount    HASH  group -> its tasks in flight
--  16 parked    ZSET  (all scores 0) group NUL ready-score NUL id: due tasks of
--                     groups at their limit, until a slot of the group frees
--  17 parkedid  HASH  id -> its member in parked
--  18 rate      ZSET  the rate limit's log: fence -> claim time (ms), at most N
--  19 completed ZSET  id -> time acked (ms), only with keep_completed, capped
--  20 workers   ZSET  worker id -> heartbeat deadline (ms): the live workers
--  21 workerinfo HASH worker id -> its last heartbeat (JSON)
--  22 timeout   HASH  id -> the task's run time limit (ms), only tasks with one
--  23 results   HASH  id -> what its handler returned (bytes), while remembered
--  24 done      ZSET  id -> when its completion (and result) is forgotten (ms)
--  25 progress  HASH  id -> progress of the running task: "pct NUL message"
--  26 blocked   ZSET  id -> due time asked for (ms): tasks waiting for dependencies
--  27 pending   HASH  id -> how many of its dependencies are not done yet
--  28 deps      HASH  id -> its dependencies (ids, each ending in NUL), until it finishes
--  29 children  HASH  id -> the tasks waiting for it (ids, each ending in NUL)
--  30 depfail   HASH  id -> 'ignore' (what a dependency's death does; default fail)
--  31 events    STREAM the queue's event log, capped (XADD MAXLEN ~)
-- ARGV[1]  id
-- ARGV[2]  lease fencing token
-- ARGV[3]  retry after (ms)
-- ARGV[4]  max attempts
-- ARGV[5]  error text (already capped by the caller)
-- Returns  1 queued for retry, 2 dead, 0 not in flight any more, -1 leased to another worker
local id = ARGV[1]
local lease = redis.call('HGET', KEYS[4], id)
if lease ~= ARGV[2] then
  if lease then return -1 end
  return 0
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
redis.call('HSET', KEYS[7], id, ARGV[5])
local group = redis.call('HGET', KEYS[13], id)
if group then release(group) end
-- A replacement held while this run went on (groups.lua's unhold) runs
-- instead of a retry, at its own due time.
local again = unhold(id, redis.call('ZSCORE', KEYS[1], id)) or in_ready(id)
local attempts = tonumber(redis.call('HGET', KEYS[5], id) or '0')
if attempts >= tonumber(ARGV[4]) and not again then
  redis.call('ZADD', KEYS[6], now, id)
  redis.call('HINCRBY', KEYS[9], 'failed', 1)
  event('dead', id, ARGV[5])
  -- Its dependents follow their policy (deps.lua).
  if DAG().in_use() then
    local r = DAG().died(id, now)
    if r[1] > 0 then wake(r[1]) end
  end
  flush_events()
  redis.call('HDEL', KEYS[25], id) -- issue 24: its progress ends with it (a retry's: at its next claim)
  return 2
end
if not again then redis.call('ZADD', KEYS[1], 'NX', now + tonumber(ARGV[3]), id) end
wake(1)
event('failed', id, ARGV[5])
flush_events()
return 1
