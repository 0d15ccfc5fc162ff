-- result: what a finished task's handler returned, while it is remembered
-- (see results.lua); also forgets a few expired results (lazy expiry).
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
--  28 deps      HASH  id -> its dependencies (JSON array), until it finishes
--  29 children  HASH  id -> the tasks waiting for it (JSON array)
--  30 depfail   HASH  id -> 'ignore' (what a dependency's death does; default fail)
--  31 events    STREAM the queue's event log, capped (XADD MAXLEN ~)
-- ARGV[1]  id
-- ARGV[2]  ms a caller of `wait_result` will wait for it when it is not
--          there yet (0: none): then `result_waiters` in `config` is moved to
--          at least now + that, so acks publish results (see results.lua)
-- Returns  the result (bytes), or nil: none (yet, or forgotten). A result
--          of an earlier run of an id that is waiting, in flight or dead
--          again is no result of the current one: nil.
local R = results_helpers()
local now = R.now()
local id = ARGV[1]
local r = false
if redis.call('EXISTS', KEYS[24]) == 1 then
  R.expire(now)
  local at = redis.call('ZSCORE', KEYS[24], id)
  if at and tonumber(at) > now then
    -- Without the finished task's summary in front of it (issue 31); a
    -- summary alone is no result.
    local _, bytes = split_result(redis.call('HGET', KEYS[23], id))
    r = bytes ~= '' and bytes
  end
  if r and (redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[3], id)
      or redis.call('ZSCORE', KEYS[6], id) or redis.call('ZSCORE', KEYS[14], id)
      or redis.call('HEXISTS', KEYS[17], id) == 1 or redis.call('ZSCORE', KEYS[26], id)) then
    r = false
  end
end
local wait = tonumber(ARGV[2])
if not r and wait > 0 then
  local _, waiters = R.config()
  if now + wait > waiters then redis.call('HSET', KEYS[11], 'result_waiters', now + wait) end
end
return r
