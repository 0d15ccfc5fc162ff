-- worker_beat: a worker's heartbeat (ARGV[1] = 'beat'), or its clean exit
-- (ARGV[1] = 'stop'). A beat stores the worker's record in `workerinfo` and
-- its deadline (server clock + TTL) in `workers`; a stop removes both. Either
-- first drops up to ARGV[6] workers whose deadline passed (a worker killed
-- without a stop), and the two keys expire with the last live worker's
-- deadline, so a queue whose workers all died keeps nothing.
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
-- ARGV[1]  'beat' or 'stop'
-- ARGV[2]  the worker's id
-- ARGV[3]  TTL of the record (ms)
-- ARGV[4]  the record: a JSON object (id, queue, host, pid, concurrency, busy,
--          in_flight, processed, failed, ttl_ms, stopping, version); this
--          script adds started_ms and last_beat_ms (server clock)
-- ARGV[5]  started_ms: when the worker started (ms, server clock); '' on its
--          first beat: now
-- ARGV[6]  how many expired workers to drop at most
-- Returns  {now (ms, server clock), how many expired workers were dropped}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZRANGEBYSCORE', KEYS[20], '-inf', now, 'LIMIT', 0, tonumber(ARGV[6]))
if #gone > 0 then
  redis.call('ZREM', KEYS[20], unpack(gone))
  redis.call('HDEL', KEYS[21], unpack(gone))
end
if ARGV[1] == 'stop' then
  redis.call('ZREM', KEYS[20], ARGV[2])
  redis.call('HDEL', KEYS[21], ARGV[2])
  if redis.call('ZCARD', KEYS[20]) == 0 then
    redis.call('DEL', KEYS[21])
  end
  return {now, #gone}
end
local record = ARGV[4]
if string.byte(record, -1) ~= 125 or string.byte(record, 1) ~= 123 or #record < 3 then
  return redis.error_reply('ERR the worker record must be a JSON object')
end
local started = ARGV[5]
if not string.match(started, '^%d+$') then
  started = string.format('%d', now)
end
record = string.sub(record, 1, -2) .. ',"started_ms":' .. started ..
  ',"last_beat_ms":' .. string.format('%d', now) .. '}'
local deadline = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[20], deadline, ARGV[2])
redis.call('HSET', KEYS[21], ARGV[2], record)
-- Both keys live as long as the latest deadline of any live worker.
local last = redis.call('ZRANGE', KEYS[20], -1, -1, 'WITHSCORES')
local until_ms = math.max(deadline, tonumber(last[2] or deadline))
redis.call('PEXPIREAT', KEYS[20], until_ms)
redis.call('PEXPIREAT', KEYS[21], until_ms)
return {now, #gone}
