-- ack: finish tasks whose lease is still ours; delete them. With the setting
-- keep_completed = N (config), the last N acked ids stay in `completed`.
-- A finished task's dependents each have one dependency fewer; the last one
-- releases them (deps.lua).
-- KEYS (all thirty-one, or on a narrow call only 1-19: a queue that never used
-- issue 24's keys; every key shares the {queue} hash tag):
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
-- ARGV[1]  how many values per task follow: 2, 3 when a task of the call
--          leaves a result, 4 when a worker says how its runs went
-- ARGV[2..] per task: id, lease fencing token (and with 3 or 4 the result:
--          bytes; '': none; with 4 also the run: "started ms:worker id",
--          '': unknown). A result is kept in `results` with its forget time
--          in `done` (see results.lua) and published to `wait_result` callers.
--          On a queue that uses issue 24's keys, a finished task that is
--          remembered (a result, or a part in dependencies) keeps a summary
--          in front of its result (results.lua's summary_of, issue 31).
-- KEYS[32..] the payload buckets of the acked ids, once the queue uses them (payload.lua; keyset.rs)
-- Returns  the status WIDE, writing nothing, on a narrow call that needs all
--          the keys (the client retries with them; keyset.rs); the status
--          BUCKETS, writing nothing, on a call that needs payload buckets it
--          was not given (payload.lua); otherwise
--          per task: 1 acked, 0 not in flight any more (lease expired and
--          returned), -1 leased to another worker now (re-claimed)
-- Needs ZMSCORE (Redis 6.2 or newer).
local function chunked(cmd, key, list)
  for i = 1, #list, 2000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 1999, #list)))
  end
end
local function fetch(cmd, key, list)
  local all = {}
  for i = 1, #list, 2000 do
    local part = redis.call(cmd, key, unpack(list, i, math.min(i + 1999, #list)))
    for k = 1, #part do all[#all + 1] = part[k] end
  end
  return all
end
local ids = {}
-- S values per task: id, fence (the result, when S >= 3; the run, when 4)
local S = tonumber(ARGV[1])
for i = 1, (#ARGV - 1) / S do ids[i] = ARGV[S * i - S + 2] end
-- Task i's result ('': none; S is 2 on a plain queue's hot path: no call).
local function result_of(i)
  if S < 3 then return '' end
  return ARGV[S * i - S + 4]
end
local out = {}
if #ids == 0 then return out end
-- One read of the settings: keep_completed, and issue 24's (see results.lua).
local cfg = redis.call('HMGET', KEYS[11], 'keep_completed', 'extras', 'events_maxlen')
-- A narrow call (the first 19 keys, see keyset.rs) for a queue that uses
-- issue 24's keys or its event log, or with results: nothing done, the
-- client calls again with all 31.
if #KEYS < 31 and (S >= 3 or cfg[2] or tonumber(cfg[3] or '0') > 0) then
  return redis.status_reply('WIDE')
end
local leases = fetch('HMGET', KEYS[4], ids)
local done, seen, any_result = {}, {}, false
for i, id in ipairs(ids) do
  local lease = leases[i]
  if seen[id] then
    out[i] = 0 -- the same lease twice in one call: the first ack took it
  elseif lease == ARGV[S * i - S + 3] then
    done[#done + 1] = id
    out[i] = 1
    if S >= 3 and result_of(i) ~= '' then any_result = true end
    -- Only an ack that took the lease marks the id: a stale fence of the
    -- same id earlier in the batch must not refuse the current one (issue 31).
    seen[id] = true
  elseif lease then
    out[i] = -1
  else
    out[i] = 0
  end
end
-- Issue 31: the payload buckets it may delete from are declared (payload.lua).
if #done > 0 and needs_buckets(done) then return redis.status_reply('BUCKETS') end
if #done > 0 then
  chunked('ZREM', KEYS[3], done)
  chunked('HDEL', KEYS[4], done)
  release_all(groups_of(done))
  -- A task enqueued again (replace) while in flight keeps its payload and history.
  local waiting = fetch('ZMSCORE', KEYS[1], done)
  local featured = redis.call('EXISTS', KEYS[12], KEYS[13], KEYS[14], KEYS[17]) > 0
  local ready, parked = {}, {}
  if featured then
    ready = fetch('ZMSCORE', KEYS[14], done)
    parked = fetch('HMGET', KEYS[17], done)
  end
  local gone = {}
  for i, id in ipairs(done) do
    if waiting[i] then
      -- unhold (groups.lua): a replacement held while this run went on is due now.
      unhold(id, waiting[i])
    elseif not ready[i] and not parked[i] then
      gone[#gone + 1] = id
    end
  end
  -- Issue 31: the summaries of finished tasks that will be remembered (with
  -- a result, or a part in dependencies), read before their fields go; only
  -- on a queue that uses issue 24's keys (or stores its first result now:
  -- all keys are here then). heads[id]: the summary.
  local heads = false
  if (cfg[2] or any_result) and #gone > 0 then
    heads = {}
    local t = redis.call('TIME')
    local finished = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local run, has_result = {}, {}
    for i, id in ipairs(ids) do
      if out[i] == 1 then
        run[id] = S == 4 and ARGV[4 * i + 1] or ''
        has_result[id] = result_of(i) ~= ''
      end
    end
    local deps = fetch('HMGET', KEYS[28], gone)
    local kids = fetch('HMGET', KEYS[29], gone)
    local kept = {}
    for i, id in ipairs(gone) do
      if has_result[id] or deps[i] or kids[i] then kept[#kept + 1] = i end
    end
    if #kept > 0 then
      local some = {}
      for k, i in ipairs(kept) do some[k] = gone[i] end
      local tries = fetch('HMGET', KEYS[5], some)
      local progress = fetch('HMGET', KEYS[25], some)
      for k, i in ipairs(kept) do
        local id = gone[i]
        local started, worker = string.match(run[id], '^(%d+):(.*)$')
        heads[id] = summary_of({tries[k] or '0', started, finished, worker,
          progress[k], deps[i], kids[i]})
      end
    end
  end
  if #gone > 0 then
    drop_payloads(gone)
    chunked('HDEL', KEYS[5], gone)
    chunked('HDEL', KEYS[7], gone)
    if featured then
      chunked('HDEL', KEYS[12], gone)
      chunked('HDEL', KEYS[13], gone)
    end
  end
  events_preset(cfg[3])
  -- Issue 24: results, progress, run-time limits; nothing for a queue that
  -- never used them (`extras` not set) and stores no result now.
  if any_result or cfg[2] then
    local R = results_helpers()
    local now = R.now()
    chunked('HDEL', KEYS[25], done)
    if #gone > 0 then chunked('HDEL', KEYS[22], gone) end
    -- A run that leaves no result also drops an earlier run's.
    local stored, plain = {}, {}
    for i, id in ipairs(ids) do
      if out[i] == 1 then
        -- The summary (issue 31) goes in front of the result; a task in a
        -- dependency graph without a result keeps its summary alone.
        local r, head = result_of(i), heads and heads[id]
        if (r ~= '' or head) and R.remember_result(id, now, (head or '') .. r) then
          if r ~= '' then stored[#stored + 1] = id end
        else
          plain[#plain + 1] = id
        end
      end
    end
    if #plain > 0 then R.drop(plain) end -- issue 31: counting their bytes off
    R.trim(now)
    if #stored > 0 then R.publish(stored, now) end
  end
  redis.call('HINCRBY', KEYS[9], 'processed', #done)
  event_many('completed', done)
  -- Dependencies (deps.lua): the last finished dependency releases a task.
  if #gone > 0 and cfg[2] and DAG().in_use() then
    local t = redis.call('TIME')
    local released = DAG().completed(gone, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    if released > 0 then wake(released) end
  end
  local keep = tonumber(cfg[1] or '0')
  if keep > 0 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local finished = {}
    for i, id in ipairs(done) do
      finished[2 * i - 1], finished[2 * i] = now, id
    end
    chunked('ZADD', KEYS[19], finished)
    redis.call('ZREMRANGEBYRANK', KEYS[19], 0, -(keep + 1))
  end
end
flush_events()
return out
