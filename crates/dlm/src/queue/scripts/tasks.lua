-- tasks: one page of the tasks in one state, for inspection (nothing moves).
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
-- ARGV[1]  the state: 'waiting' (due now, with the priority set and parked tasks), 'delayed' (due later), 'inflight',
--          'dead', 'blocked' (waiting for dependencies) or 'completed' (remembered in `done`)
-- ARGV[2]  offset: how many tasks of that state to skip, in order
-- ARGV[3]  how many at most (the caller caps it)
-- ARGV[4]  how many payload bytes to return at most per task
-- Returns  {now (ms), how many tasks are in that state,
--           then per task seven values: id, score (due time, lease deadline or time it
--           died), attempts (times claimed), lease fencing token (nil: none),
--           payload length (-1: no payload), payload preview (nil: none),
--           last error (nil: none)}
-- Issue 31: the payload buckets it may touch are declared (payload.lua).
if needs_buckets() then return redis.status_reply('BUCKETS') end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state, offset, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local preview = tonumber(ARGV[4])
local total, page
if state == 'waiting' then
  -- In claim order: the tasks in `ready` (priority, then due time), the due
  -- ones not moved there yet, then the parked ones (groups at their limit).
  local ready = redis.call('ZCARD', KEYS[14])
  local due = redis.call('ZCOUNT', KEYS[1], '-inf', now)
  local parked = redis.call('ZCARD', KEYS[16])
  total = ready + due + parked
  page = {}
  local function add(list, decode)
    for i = 1, #list, 2 do
      page[#page + 1] = list[i]
      page[#page + 1] = decode(list[i], tonumber(list[i + 1]))
    end
  end
  local function due_time(id, score)
    return score + tonumber(redis.call('HGET', KEYS[12], id) or '0') * 4398046511104
  end
  if offset < ready then
    add(redis.call('ZRANGE', KEYS[14], offset, offset + limit - 1, 'WITHSCORES'), due_time)
  end
  local skip = math.max(0, offset - ready)
  local want = limit - #page / 2
  if want > 0 and skip < due then
    add(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', skip, want),
        function(_, score) return score end)
  end
  skip = math.max(0, offset - ready - due)
  want = limit - #page / 2
  if want > 0 and skip < parked then
    for _, m in ipairs(redis.call('ZRANGE', KEYS[16], skip, skip + want - 1)) do
      local at = string.find(m, '\0', 1, true) + 1
      local id = string.sub(m, at + 18)
      page[#page + 1] = id
      page[#page + 1] = due_time(id, tonumber(string.sub(m, at, at + 16)) - 4503599627370496)
    end
  end
elseif state == 'blocked' then
  -- by the due time asked for
  total = redis.call('ZCARD', KEYS[26])
  page = redis.call('ZRANGE', KEYS[26], offset, offset + limit - 1, 'WITHSCORES')
elseif state == 'completed' then
  -- remembered completions, by when they are forgotten (completion order);
  -- the score is that time
  total = redis.call('ZCOUNT', KEYS[24], '(' .. now, '+inf')
  page = redis.call('ZRANGEBYSCORE', KEYS[24], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', offset, limit)
elseif state == 'delayed' then
  total = redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
  page = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', offset, limit)
else
  local key = KEYS[3]
  if state == 'dead' then key = KEYS[6] end
  total = redis.call('ZCARD', key)
  page = redis.call('ZRANGE', key, offset, offset + limit - 1, 'WITHSCORES')
end
local out = {now, total}
local ids = {}
for i = 1, #page, 2 do ids[#ids + 1] = page[i] end
local payloads = payloads_of(ids, small_count() > 0)
for i = 1, #page, 2 do
  local id = page[i]
  local payload = payloads[(i + 1) / 2]
  local length, head = -1, false
  if payload then
    length = #payload
    head = string.sub(payload, 1, preview)
  end
  local fence = false
  if state == 'inflight' then fence = tonumber(redis.call('HGET', KEYS[4], id) or '0') end
  out[#out + 1] = id
  local score = tonumber(page[i + 1])
  -- A delayed entry at or above 2^52 is a replacement held until the run in
  -- flight settles (groups.lua's HOLD): show its due time.
  if state == 'delayed' and score >= 4503599627370496 then score = score - 4503599627370496 end
  out[#out + 1] = score
  out[#out + 1] = tonumber(redis.call('HGET', KEYS[5], id) or '0')
  out[#out + 1] = fence
  out[#out + 1] = length
  out[#out + 1] = head
  out[#out + 1] = redis.call('HGET', KEYS[7], id)
end
return out
