-- pause: stop (ARGV[1] = '1') or let again (ARGV[1] = '0') every worker's
-- claims; enqueues, acks and nacks go on, and the seeds' top/pop are not
-- claims. Resuming wakes idle workers (up to 64 markers on `signal`).
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
-- ARGV[1]  '1' pause, '0' resume ('get' with ARGV[2] 'get': change nothing)
-- ARGV[2]  absent: a queue that is not sharded
--          'lead': shard 0 of a sharded queue: the change gets the next
--          generation (`pause_gen`, counted on shard 0)
--          a number g: shard i >= 1 of a sharded queue: the change of
--          generation g from shard 0, applied only when g is not older than
--          the one this shard has (so a late write of an older pause or
--          resume, e.g. by a change of K, cannot undo a newer one)
--          'get': read shard 0's state
-- Returns  without ARGV[2]: 1 if the queue was paused before this call,
--          else 0; with it: {that, the generation now}
local was = redis.call('HEXISTS', KEYS[11], 'paused')
local mode = ARGV[2]
if mode == 'get' then
  return {was, tonumber(redis.call('HGET', KEYS[11], 'pause_gen') or '0')}
end
local gen = nil
if mode == 'lead' then
  gen = redis.call('HINCRBY', KEYS[11], 'pause_gen', 1)
elseif mode then
  gen = tonumber(mode)
  local have = tonumber(redis.call('HGET', KEYS[11], 'pause_gen') or '0')
  if gen < have then return {was, have} end
  redis.call('HSET', KEYS[11], 'pause_gen', gen)
end
if ARGV[1] == '1' then
  redis.call('HSET', KEYS[11], 'paused', '1')
else
  redis.call('HDEL', KEYS[11], 'paused')
  if was == 1 then
    local marks = {}
    for _ = 1, 64 do marks[#marks + 1] = '1' end
    redis.call('LPUSH', KEYS[10], unpack(marks))
    redis.call('LTRIM', KEYS[10], 0, 63)
  end
end
if gen then return {was, gen} end
return was
