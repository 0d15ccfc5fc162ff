-- claim: first return expired leases to the queue (or to the dead set after
-- max attempts), then lease up to ARGV[1] due tasks, earliest first.
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
-- ARGV[1]  how many to claim (0: only return expired leases)
-- ARGV[2]  lease length in ms
-- ARGV[3]  max attempts (a task whose lease expired on its last attempt dies)
-- ARGV[4]  how many expired leases to return at most in this call
-- ARGV[5]  on a sharded queue only: the caller's layout version (layout_gate.lua)
-- Settings read from `config`: paused ('1': claim nothing, see pause.lua),
-- group_concurrency (k: a group's tasks in flight
-- at most), rate_n / rate_period_ms (at most n claims in any window of that
-- length: a sliding log of the last n claim times, exact).
-- Queues with priorities or groups (`ready` in use): due tasks of `waiting`
-- (at most 1000 + 4 * count per call) move to `ready` first; then the
-- lowest scores of `ready` are scanned, at most 4 * count + 64 of them: a
-- task of a group at its limit is parked (held aside until a slot of its
-- group frees), so a busy group never holds back the others.
-- KEYS[32..] all 4096 payload buckets, once the queue uses them (payload.lua; keyset.rs)
-- Returns  the status LAYOUT, writing nothing, when the caller's layout is
--          stale (layout_gate.lua); the status WIDE, writing nothing, on a narrow call that needs all
--          the keys (the client retries with them; keyset.rs); the status
--          BUCKETS, writing nothing, on a call that needs payload buckets it
--          was not given (payload.lua); otherwise
--          {expired_returned, ms_until_next_due (-1: nothing waiting), now (ms),
--           died (how many of the expired moved to the dead set),
--           ms until the rate limit allows the next claim (-1: not limited now),
--           how many values per task follow (7, or 9 once the queue uses
--           time limits, results or dependencies: `extras`),
--           then per claimed task: id, due time, payload (nil: none),
--           lease fencing token, attempt number (1 = first), priority, group (nil: none),
--           and with 9 its run-time limit in ms (0: none) and dependencies (ids
--           each ending in NUL; nil: none)}
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease_ms, max_attempts = tonumber(ARGV[2]), tonumber(ARGV[3])
local cfg = redis.call('HMGET', KEYS[11], 'group_concurrency', 'rate_n', 'rate_period_ms', 'paused', 'extras', 'events_maxlen', 'deps_sweep_at', 'layout')
if layout_stale(cfg[8], ARGV[5] or false) then return redis.status_reply('LAYOUT') end
local extras = cfg[5] == '1' -- issue 24's keys in use (see results.lua)
-- A narrow call (the first 19 keys, see keyset.rs) for a queue that uses
-- issue 24's keys or its event log: nothing done, the client calls again
-- with all 31.
if #KEYS < 31 and (extras or tonumber(cfg[6] or '0') > 0) then
  return redis.status_reply('WIDE')
end
-- Issue 31: the payload buckets it may read are declared (payload.lua).
if tonumber(ARGV[1]) > 0 and needs_buckets() then return redis.status_reply('BUCKETS') end
events_preset(cfg[6])
local limit = tonumber(cfg[1] or '0')
local rate_n, rate_p = tonumber(cfg[2] or '0'), tonumber(cfg[3] or '0')
local function chunked(cmd, key, list)
  for i = 1, #list, 2000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 1999, #list)))
  end
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
release_all(groups_of(expired))
if extras and #expired > 0 then chunked('HDEL', KEYS[25], expired) end -- issue 24: progress ends with the lease
local died = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  local attempts = tonumber(redis.call('HGET', KEYS[5], id) or '0')
  -- A replacement held while this run went on (groups.lua's unhold) is due now.
  local again = unhold(id, redis.call('ZSCORE', KEYS[1], id)) or in_ready(id)
  if attempts >= max_attempts and not again then
    redis.call('ZADD', KEYS[6], now, id)
    redis.call('HSET', KEYS[7], id, 'lease expired on attempt ' .. attempts)
    event('dead', id, 'lease expired on attempt ' .. attempts)
    redis.call('HINCRBY', KEYS[9], 'failed', 1)
    died = died + 1
    -- Its dependents follow their policy (deps.lua).
    if extras and DAG().in_use() then
      local r = DAG().died(id, now)
      if r[1] > 0 then wake(r[1]) end
    end
  elseif not again then
    redis.call('ZADD', KEYS[1], 'NX', now, id)
    event('failed', id, 'lease expired')
  end
end
-- Issue 31: every UNKNOWN_DEP_SWEEP_MS at most, a claim of a queue with
-- dependencies looks for tasks blocked on an id never enqueued, longer than
-- UNKNOWN_DEP_WAIT_MS past their due time (deps.lua's expire_unknown; the
-- time and the cursor are kept in `config`, read above with the settings).
local UNKNOWN_DEP_WAIT_MS = 86400000 -- 24 hours: dlm::queue::UNKNOWN_DEPENDENCY_WAIT
local UNKNOWN_DEP_SWEEP_MS = 10000
if extras and now >= tonumber(cfg[7] or '0') and DAG().in_use() then
  local from = redis.call('HGET', KEYS[11], 'deps_sweep_from')
  local r = DAG().expire_unknown(now, UNKNOWN_DEP_WAIT_MS, from and tonumber(from))
  redis.call('HSET', KEYS[11], 'deps_sweep_at', now + UNKNOWN_DEP_SWEEP_MS)
  if r[1] then
    redis.call('HSET', KEYS[11], 'deps_sweep_from', r[1])
  else
    redis.call('HDEL', KEYS[11], 'deps_sweep_from')
  end
  if r[2] > 0 then wake(r[2]) end
end
local out = {#expired, -1, now, died, -1, extras and 9 or 7}
local want = tonumber(ARGV[1])
-- A paused queue: expired leases still come back, nothing is claimed.
local paused = cfg[4] == '1'
if paused then want = 0 end
if want > 0 and rate_n > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[18], '-inf', '(' .. (now - rate_p))
  want = math.max(0, math.min(want, rate_n - redis.call('ZCARD', KEYS[18])))
end
local featured = redis.call('EXISTS', KEYS[12], KEYS[13], KEYS[14]) > 0
-- ids, due times, priorities and groups of the tasks taken
local ids, dues, prios, groups = {}, {}, {}, {}
if want > 0 and featured then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1000 + 4 * want)
  if #due > 0 then
    local moved, pids, scored = {}, {}, {}
    for i = 1, #due / 2 do moved[i] = due[2 * i - 1] end
    local ps = hmget_many(KEYS[12], moved)
    for i, id in ipairs(moved) do
      scored[2 * i - 1] = ready_score(ps[i], tonumber(due[2 * i]))
      scored[2 * i] = id
    end
    chunked('ZADD', KEYS[14], scored)
    chunked('ZREM', KEYS[1], moved)
  end
  local cand = redis.call('ZRANGE', KEYS[14], 0, 4 * want + 63, 'WITHSCORES')
  local cids = {}
  for i = 1, #cand / 2 do cids[i] = cand[2 * i - 1] end
  local cgroups = groups_of(cids)
  local cprios = hmget_many(KEYS[12], cids)
  local busy, started, gone = {}, {}, {}
  for i, id in ipairs(cids) do
    if #ids >= want then break end
    local g, score = cgroups[i], tonumber(cand[2 * i])
    local take = true
    if g then
      if busy[g] == nil then busy[g] = tonumber(redis.call('HGET', KEYS[15], g) or '0') end
      if limit > 0 and busy[g] >= limit then
        take = false
        park(g, score, id)
      else
        busy[g] = busy[g] + 1
        started[g] = (started[g] or 0) + 1
      end
    end
    gone[#gone + 1] = id
    if take then
      local p = tonumber(cprios[i] or '0')
      ids[#ids + 1] = id
      dues[#ids] = score + p * PRIO_UNIT
      prios[#ids] = p
      groups[#ids] = g or false
    end
  end
  if #gone > 0 then chunked('ZREM', KEYS[14], gone) end
  for g, k in pairs(started) do redis.call('HINCRBY', KEYS[15], g, k) end
elseif want > 0 then
  local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, want)
  for i = 1, #due / 2 do
    ids[i] = due[2 * i - 1]
    dues[i] = tonumber(due[2 * i])
    prios[i] = 0
    groups[i] = false
  end
  -- The due tasks are the lowest scores: ranks 0 .. n-1.
  if #ids > 0 then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, #ids - 1) end
end
local n = #ids
if n > 0 then
  -- A few commands for the whole batch, not a few per task; in chunks, as
  -- Lua's unpack() is limited to a few thousand values.
  local first_fence = redis.call('INCRBY', KEYS[8], n) - n + 1
  local payloads = payloads_of(ids, small_count() > 0)
  local attempts = hmget_many(KEYS[5], ids)
  -- Issue 24: run-time limits and dependencies (handlers may read their
  -- results), read only once the queue has used them.
  local timeouts, deps = {}, {}
  if extras then
    timeouts = hmget_many(KEYS[22], ids)
    deps = hmget_many(KEYS[28], ids)
    chunked('HDEL', KEYS[25], ids) -- a new run: an earlier run's progress goes
  end
  local leases, flying, counts, log = {}, {}, {}, {}
  local deadline = now + lease_ms
  for i = 1, n do
    local id, fence = ids[i], first_fence + i - 1
    local attempt = tonumber(attempts[i] or '0') + 1
    leases[2 * i - 1], leases[2 * i] = id, fence
    flying[2 * i - 1], flying[2 * i] = deadline, id
    counts[2 * i - 1], counts[2 * i] = id, attempt
    log[2 * i - 1], log[2 * i] = now, fence
    out[#out + 1] = id
    out[#out + 1] = dues[i]
    out[#out + 1] = payloads[i]
    out[#out + 1] = fence
    out[#out + 1] = attempt
    out[#out + 1] = prios[i]
    out[#out + 1] = groups[i]
    if extras then
      local limit = timeouts[i]
      out[#out + 1] = limit and tonumber(limit) or 0
      out[#out + 1] = deps[i] or false
    end
  end
  event_many('claimed', ids)
  chunked('HSET', KEYS[4], leases)
  chunked('ZADD', KEYS[3], flying)
  chunked('HSET', KEYS[5], counts)
  if rate_n > 0 then chunked('ZADD', KEYS[18], log) end
end
if rate_n > 0 and tonumber(ARGV[1]) > 0 and redis.call('ZCARD', KEYS[18]) >= rate_n then
  local oldest = redis.call('ZRANGE', KEYS[18], 0, 0, 'WITHSCORES')
  if oldest[2] then out[5] = math.max(1, tonumber(oldest[2]) + rate_p + 1 - now) end
end
if paused then
  out[2] = -1 -- nothing claimable: idle until resumed (pause.lua wakes)
elseif redis.call('ZCARD', KEYS[14]) > 0 then
  out[2] = 0
else
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  -- Only held replacements (HOLD, groups.lua): nothing due until a run settles.
  if first[2] and tonumber(first[2]) < HOLD then
    out[2] = math.max(0, tonumber(first[2]) - now)
  end
end
flush_events()
return out
