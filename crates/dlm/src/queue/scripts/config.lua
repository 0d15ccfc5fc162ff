-- config: read or change the queue's settings (every worker reads them at
-- each claim, so the latest value written holds for all).
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
-- ARGV[1]  'get', 'set' or 'clear'
-- ARGV[2..] with 'set': field, value pairs (fields: group_concurrency, rate_n,
--          rate_period_ms, keep_completed, keep_results_ms, events_maxlen,
--          keep_results_bytes; value '': remove the setting). keep_results_ms:
--          how long results are kept (0: not at all; not set: 1 hour). Results
--          kept so far stay until their time. keep_results_bytes: how many
--          bytes of results are kept at most (not set: 64 MiB; see results.lua),
--          applied from the next result stored. Turning the event log off (events_maxlen '') deletes it.
-- Not settings, kept by 'clear': paused and pause_gen (pause.lua), result_waiters (ms
-- until which a `wait_result` may wait, see result.lua) and extras (issue
-- 24's keys in use, see results.lua), and a sharded queue's layout
-- (shards, layout, shard_n, draining, shard, closed: layout.lua).
-- 'clear' removes every setting, the rate log, the completed history and
-- the event log.
-- A new group concurrency (or none) moves every parked task back to `ready`:
-- the next claims apply the new limit to them.
-- Returns  {group_concurrency, rate_n, rate_period_ms, keep_completed,
--          keep_results_ms, events_maxlen, keep_results_bytes} (nil: not set)
local fields = {'group_concurrency', 'rate_n', 'rate_period_ms', 'keep_completed', 'keep_results_ms', 'events_maxlen', 'keep_results_bytes'}
local function unpark_all()
  local parked = redis.call('ZRANGE', KEYS[16], 0, -1)
  for _, m in ipairs(parked) do
    local at = string.find(m, '\0', 1, true) + 1
    local score = tonumber(string.sub(m, at, at + 16)) - 4503599627370496
    redis.call('ZADD', KEYS[14], score, string.sub(m, at + 18))
  end
  redis.call('DEL', KEYS[16], KEYS[17])
  if #parked > 0 then
    redis.call('LPUSH', KEYS[10], '1')
    redis.call('LTRIM', KEYS[10], 0, 63)
  end
end
if ARGV[1] == 'clear' then
  -- Pausing is no setting: a paused queue stays paused.
  local kept = {'paused', 'result_waiters', 'extras', 'shards', 'layout', 'shard_n', 'draining', 'shard', 'closed', 'pause_gen'}
  local values = redis.call('HMGET', KEYS[11], unpack(kept))
  redis.call('DEL', KEYS[11], KEYS[18], KEYS[19], KEYS[31])
  for i, field in ipairs(kept) do
    if values[i] then redis.call('HSET', KEYS[11], field, values[i]) end
  end
  unpark_all()
elseif ARGV[1] == 'set' then
  for i = 2, #ARGV, 2 do
    if ARGV[i] == 'group_concurrency' then unpark_all() end
    if ARGV[i + 1] == '' then
      redis.call('HDEL', KEYS[11], ARGV[i])
      if ARGV[i] == 'rate_n' then redis.call('DEL', KEYS[18]) end
      if ARGV[i] == 'keep_completed' then redis.call('DEL', KEYS[19]) end
      if ARGV[i] == 'events_maxlen' then redis.call('DEL', KEYS[31]) end
    else
      redis.call('HSET', KEYS[11], ARGV[i], ARGV[i + 1])
    end
  end
  local keep = tonumber(redis.call('HGET', KEYS[11], 'keep_completed') or '0')
  if keep > 0 then redis.call('ZREMRANGEBYRANK', KEYS[19], 0, -(keep + 1)) end
end
return redis.call('HMGET', KEYS[11], unpack(fields))
