-- dead: list dead tasks, oldest death first.
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
-- KEYS[32..] the payload buckets (all 4096) once the queue uses them; without
--          them such a queue gets the status BUCKETS (payload.lua; keyset.rs)
-- ARGV[1]  how many at most
-- Returns  per task four values: id, time it died (ms), last error (nil: none), payload (nil: none)
-- Issue 31: the payload buckets it may touch are declared (payload.lua).
if needs_buckets() then return redis.status_reply('BUCKETS') end
local r = redis.call('ZRANGE', KEYS[6], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local ids = {}
for i = 1, #r, 2 do ids[#ids + 1] = r[i] end
local payloads = payloads_of(ids, small_count() > 0)
local out = {}
for k, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = tonumber(r[2 * k])
  out[#out + 1] = redis.call('HGET', KEYS[7], id)
  out[#out + 1] = payloads[k]
end
return out
