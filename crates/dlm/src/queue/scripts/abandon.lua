-- abandon: give leased tasks back at once (graceful shutdown); the attempt
-- does not count.
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
-- ARGV     per task two values: id, lease fencing token
-- Returns  how many were given back; -1 when none was and another lease holds
--          one of the tasks (a stale lease: `LeaseLost { taken: true }`)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = 0
local taken = false
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local current = redis.call('HGET', KEYS[4], id)
  if current and current ~= ARGV[i + 1] then taken = true end
  if current == ARGV[i + 1] then
    redis.call('ZREM', KEYS[3], id)
    redis.call('HDEL', KEYS[4], id)
    redis.call('HDEL', KEYS[25], id) -- issue 24: this run's progress ends with it
    local group = redis.call('HGET', KEYS[13], id)
    if group then release(group) end
    -- A replacement held while this run went on (groups.lua's unhold) comes
    -- due at its own due time; else the task is due again now.
    if not unhold(id, redis.call('ZSCORE', KEYS[1], id)) and not in_ready(id) then
      redis.call('ZADD', KEYS[1], 'NX', now, id)
    end
    -- The attempt does not count (never below none: issue 31).
    if redis.call('HINCRBY', KEYS[5], id, -1) <= 0 then redis.call('HDEL', KEYS[5], id) end
    n = n + 1
  end
end
if n > 0 then
  redis.call('LPUSH', KEYS[10], '1')
  redis.call('LTRIM', KEYS[10], 0, 63)
end
if n == 0 and taken then return -1 end
return n
