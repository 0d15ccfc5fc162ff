-- workers: the live workers of the queue (deadline still ahead), read only.
-- A record that is not valid JSON (written by hand) is skipped.
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
-- ARGV[1]  how many workers at most
-- Returns  {now (ms, server clock), then per worker 14 values: id, deadline
--           (ms), host, pid, started_ms, concurrency, busy, processed, failed,
--           last_beat_ms, ttl_ms, stopping (1/0), version, in_flight (array)}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[20], '(' .. now, '+inf', 'WITHSCORES',
  'LIMIT', 0, tonumber(ARGV[1]))
local out = {now}
if #live == 0 then
  return out
end
local ids = {}
for i = 1, #live, 2 do
  ids[#ids + 1] = live[i]
end
local records = redis.call('HMGET', KEYS[21], unpack(ids))
local function num(v)
  if type(v) == 'number' and v >= 0 then return v end
  return 0
end
local function str(v)
  if type(v) == 'string' then return v end
  return ''
end
for i, id in ipairs(ids) do
  local ok, r = false, nil
  if type(records[i]) == 'string' then
    ok, r = pcall(cjson.decode, records[i])
  end
  if ok and type(r) == 'table' then
    local flying = {}
    if type(r.in_flight) == 'table' then
      for _, task in ipairs(r.in_flight) do
        if type(task) == 'string' then flying[#flying + 1] = task end
      end
    end
    out[#out + 1] = id
    out[#out + 1] = tonumber(live[2 * i])
    out[#out + 1] = str(r.host)
    out[#out + 1] = num(r.pid)
    out[#out + 1] = num(r.started_ms)
    out[#out + 1] = num(r.concurrency)
    out[#out + 1] = num(r.busy)
    out[#out + 1] = num(r.processed)
    out[#out + 1] = num(r.failed)
    out[#out + 1] = num(r.last_beat_ms)
    out[#out + 1] = num(r.ttl_ms)
    out[#out + 1] = (r.stopping == true) and 1 or 0
    out[#out + 1] = str(r.version)
    out[#out + 1] = flying
  end
end
return out
