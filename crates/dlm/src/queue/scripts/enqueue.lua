-- enqueue: add tasks due at now + delay; an id already waiting or in flight is
-- kept (mode 'keep') or replaced (mode 'replace': new due time and payload;
-- a task in flight keeps its lease and attempts, and its replacement is held
-- until that run settles: groups.lua's HOLD).
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
-- ARGV[1]  delay in ms (>= 0)
-- ARGV[2]  'keep' or 'replace'
-- ARGV[3]  '1': small payloads go to their bucket (compact), '0': to `payload`
-- ARGV[4]  how many values per task follow: 5, or 8 when a task of the call
--          has a run-time limit or dependencies (plain batches send less)
-- ARGV[5..] per task five values: id, '1' with payload / '0' without, payload,
--          priority (integer, '0': none), group ('': none); with 8 also its
--          run-time limit in ms ('0': none), dependencies (ids each ending in
--          NUL, '': none), dependency flags ('i': ignore a dependency's death,
--          'l': a dependency may be an id not known yet; '' neither)
-- ARGV[last] on a sharded queue only: the caller's layout version (see
--          layout_gate.lua); present when (#ARGV - 4) mod the stride is 1
-- A task with a priority or a group that is due now goes to `ready`; so does
-- every task due now once the queue has such tasks (claim orders `ready`).
-- A task with dependencies (see deps.lua) is new only: an id already there
-- (waiting, in flight or blocked) is kept whatever ARGV[2] says. It waits in
-- `blocked` until every dependency is done; one whose dependency is already
-- dead dies at once (unless it ignores that). Every dependency must be
-- known (alive, dead, remembered as done, or in this batch) unless flag 'l'
-- is given, and no dependency may lead back to the task: otherwise nothing is
-- written and the reply is {'unknown', id of the dependency, task id} or
-- {'cycle', task id, dependency id}.
-- KEYS[32..] the payload buckets of the call's ids, once the queue uses them
--          (payload.lua; keyset.rs)
-- Returns  the status LAYOUT, writing nothing, when the caller's layout is
--          stale (layout_gate.lua); the status WIDE, writing nothing, on a narrow call that needs all
--          the keys (the client retries with them; keyset.rs); the status
--          BUCKETS, writing nothing, on a call that needs payload buckets it
--          was not given (payload.lua); otherwise
--          per task two values: status (1 added, 0 kept as it was, 2 replaced,
--          3 blocked by dependencies, 4 dead: a dependency died), and the
--          task's due time (ms; -1 for a kept task that is in flight)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = now + tonumber(ARGV[1])
local replace = ARGV[2] == 'replace'
local featured = redis.call('EXISTS', KEYS[12], KEYS[13], KEYS[14]) > 0
local out, added = {}, 0
local STRIDE = tonumber(ARGV[4])
local LAYOUT = false
if (#ARGV - 4) % STRIDE == 1 then LAYOUT = table.remove(ARGV) end
local FULL = STRIDE == 8
-- Dependencies: the whole batch is checked before anything is written.
local any_deps = false
if FULL then
  for i = 5, #ARGV, STRIDE do
    if ARGV[i + 6] ~= '' then any_deps = true end
  end
end
-- Issue 24's settings in one read: extras (see results.lua; dependencies set
-- it too) and the event log's cap (events.lua).
local ecfg = redis.call('HMGET', KEYS[11], 'extras', 'events_maxlen', 'layout', 'closed')
-- A shard that a lowering drains or removed takes no new task (layout.lua).
if layout_stale(ecfg[3], LAYOUT) or (LAYOUT and ecfg[4]) then return redis.status_reply('LAYOUT') end
-- A narrow call (the first 19 keys, see keyset.rs) for a queue that uses
-- issue 24's keys or its event log, or for tasks that need them: nothing
-- written, and the client calls again with all 31.
if #KEYS < 31 and (FULL or ecfg[1] == '1' or tonumber(ecfg[2] or '0') > 0) then
  return redis.status_reply('WIDE')
end
-- Issue 31: the payload buckets this call may touch are declared (payload.lua):
-- a call without them for a queue that has bucket entries, or that writes
-- some (compact small payloads), writes nothing and answers BUCKETS.
if #KEYS <= 31 and (ARGV[3] == '1' or small_count() > 0) then
  local ids, writes = {}, false
  for i = 5, #ARGV, STRIDE do
    ids[#ids + 1] = ARGV[i]
    if ARGV[3] == '1' and ARGV[i + 1] == '1' and #ARGV[i + 2] <= SMALL_PAYLOAD and #ARGV[i] <= SMALL_PAYLOAD then
      writes = true
    end
  end
  if needs_buckets(ids, writes) then return redis.status_reply('BUCKETS') end
end
events_preset(ecfg[2])
local dag = any_deps or (ecfg[1] == '1' and redis.call('EXISTS', KEYS[26]) == 1)
-- Tables only for calls with dependencies: a plain call makes none.
-- new_kids[d]: the tasks of this batch that wait for d (written at the end);
-- edges[d]: the new tasks that wait for d (a list of ids), written at the end
local in_batch, died_here, edges
if any_deps then
  local new_kids, is_new = {}, {}
  in_batch, died_here, edges = {}, {}, {}
  for i = 5, #ARGV, STRIDE do
    in_batch[ARGV[i]] = true
    if not is_new[ARGV[i]] and ARGV[i + 6] ~= '' and not DAG().alive(ARGV[i]) then is_new[ARGV[i]] = i end
  end
  for id, i in pairs(is_new) do
    local later = string.find(ARGV[i + 7], 'l', 1, true)
    for _, d in ipairs(DAG().split_ids(ARGV[i + 6])) do
      if d == id then return {'cycle', id, d} end
      if not (later or in_batch[d] or DAG().alive(d) or DAG().known_done(d, now)
              or redis.call('ZSCORE', KEYS[6], d)) then
        return {'unknown', d, id}
      end
      new_kids[d] = new_kids[d] or {}
      table.insert(new_kids[d], id)
    end
  end
  -- No cycle: a depth-first walk down the dependents (stored and new) from
  -- every new task finds no edge back to a task on the walk's path. The
  -- stored graph has none, so a cycle would pass through a new task.
  local color, visited = {}, 0
  local function kids_of(n)
    local kids = DAG().split_ids(redis.call('HGET', KEYS[29], n))
    for _, k in ipairs(new_kids[n] or {}) do kids[#kids + 1] = k end
    return kids
  end
  for root, _ in pairs(is_new) do
    if not color[root] then
      color[root] = 1
      local stack = {{root, kids_of(root), 0}}
      while #stack > 0 do
        local top = stack[#stack]
        if top[3] < #top[2] then
          top[3] = top[3] + 1
          local k = top[2][top[3]]
          if color[k] == 1 then return {'cycle', k, top[1]} end
          if not color[k] then
            visited = visited + 1
            if visited > 100000 then
              return redis.error_reply('ERR dlm: the dependency graph below ' .. root .. ' has over 100000 tasks to check')
            end
            color[k] = 1
            stack[#stack + 1] = {k, kids_of(k), 0}
          end
        else
          color[top[1]] = 2
          stack[#stack] = nil
        end
      end
    end
  end
end
-- Payloads: see payload.lua (small ones in buckets, counted in stats `small`).
local small, bucketed = small_count() > 0, 0
local compact = ARGV[3] == '1'
-- Issue 24: whether `extras` (see results.lua) is set.
local extras = ecfg[1] == '1'
for i = 5, #ARGV, STRIDE do
  local id, prio, group = ARGV[i], ARGV[i + 3], ARGV[i + 4]
  local limit, deps = '0', ''
  if FULL then limit, deps = ARGV[i + 5], ARGV[i + 6] end
  local cur = redis.call('ZSCORE', KEYS[1], id)
  -- A replacement held until the run in flight settles: its due time.
  if cur and tonumber(cur) >= HOLD then cur = tonumber(cur) - HOLD end
  local ready, parked = false, false
  if featured then
    ready = redis.call('ZSCORE', KEYS[14], id)
    parked = redis.call('HGET', KEYS[17], id)
  end
  if ready or parked then
    local p = tonumber(redis.call('HGET', KEYS[12], id) or '0')
    if ready then
      cur = tonumber(ready) + p * PRIO_UNIT
    else
      local at = #parked - #id - 17
      cur = tonumber(string.sub(parked, at, at + 16)) - PARK_OFFSET + p * PRIO_UNIT
    end
  end
  local flying = redis.call('ZSCORE', KEYS[3], id)
  local blocked = dag and redis.call('ZSCORE', KEYS[26], id)
  if (cur or flying) and (not replace or deps ~= '') or blocked then
    out[#out + 1] = 0
    out[#out + 1] = tonumber(cur or blocked or -1)
  else
    if ready then redis.call('ZREM', KEYS[14], id) end
    if parked then
      redis.call('ZREM', KEYS[16], parked)
      redis.call('HDEL', KEYS[17], id)
    end
    -- A task replaced while in flight keeps its lease: its slot moves to the
    -- new group, so the ack frees the slot that is counted.
    if flying and featured then
      local old = redis.call('HGET', KEYS[13], id)
      if old ~= (group ~= '' and group) then
        if old then release(old) end
        if group ~= '' then redis.call('HINCRBY', KEYS[15], group, 1) end
      end
    elseif flying and group ~= '' then
      redis.call('HINCRBY', KEYS[15], group, 1)
    end
    -- A plain task in a queue without priorities or groups costs nothing more.
    if featured then
      redis.call('HDEL', KEYS[12], id)
      redis.call('HDEL', KEYS[13], id)
    end
    if prio ~= '0' then
      redis.call('HSET', KEYS[12], id, prio)
      featured = true
    end
    if group ~= '' then
      redis.call('HSET', KEYS[13], id, group)
      featured = true
    end
    -- With dependencies: how many are not done yet, and whether one died.
    local waits, doomed, status = 0, false, 0
    if deps ~= '' then
      local ignore = string.find(ARGV[i + 7], 'i', 1, true)
      local counted, mine = {}, {}
      for _, d in ipairs(DAG().split_ids(deps)) do
        if counted[d] then
          -- listed twice: counted once
        elseif in_batch[d] or DAG().alive(d)
            or (not redis.call('ZSCORE', KEYS[6], d) and not DAG().known_done(d, now)) then
          -- Waited for: in this call, alive (waiting, delayed, in flight or
          -- blocked: enqueued again, whatever an earlier run left in `done`;
          -- issue 31), or not known yet (flag 'l').
          counted[d] = true
          waits = waits + 1
          mine[#mine + 1] = d
        elseif not ignore and redis.call('ZSCORE', KEYS[6], d) then
          doomed = doomed or d
        end
      end
      -- The edges of a task that waits; none for one written dead (issue 31:
      -- its edges would outlive it).
      if not doomed then
        for _, d in ipairs(mine) do
          edges[d] = edges[d] or {}
          table.insert(edges[d], id)
        end
      end
      redis.call('HSET', KEYS[28], id, deps)
      if ignore then redis.call('HSET', KEYS[30], id, 'ignore') end
    end
    local was_dead = redis.call('ZREM', KEYS[6], id) == 1
    if doomed then
      status = 4
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZADD', KEYS[6], now, id)
      redis.call('HSET', KEYS[7], id, "dependency '" .. doomed .. "' died")
      redis.call('HINCRBY', KEYS[9], 'failed', 1)
      died_here[#died_here + 1] = id
    elseif waits > 0 then
      status = 3
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZADD', KEYS[26], score, id)
      redis.call('HSET', KEYS[27], id, waits)
      dag = true
    elseif flying then -- [seeded LeakedGroupSlot: hold the replacement]
      -- Replaced while in flight: held until the run settles (groups.lua's
      -- HOLD), so the id is never leased twice at once (issue 31). (The
      -- marker names this line for the `seeded-defects` feature's
      -- LeakedGroupSlot variant, a test-only build: src/seeded.rs.)
      redis.call('ZADD', KEYS[1], HOLD + score, id)
    elseif featured and score <= now then
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZADD', KEYS[14], ready_score(prio, score), id)
    else
      redis.call('ZADD', KEYS[1], score, id)
    end
    local delta = put_payload(id, ARGV[i + 1] == '1' and ARGV[i + 2], cur or flying or was_dead, small, compact)
    if delta > 0 then small = true end
    bucketed = bucketed + delta
    -- A task waiting or in flight keeps its attempts (the running attempt
    -- still counts, issue 31); a new or dead one starts again.
    if not cur and not flying then
      redis.call('HDEL', KEYS[5], id)
    end
    if not doomed then redis.call('HDEL', KEYS[7], id) end
    -- Issue 24: the new run's time limit replaces the earlier one's.
    if extras and (cur or flying or was_dead) then redis.call('HDEL', KEYS[22], id) end
    if limit ~= '0' then redis.call('HSET', KEYS[22], id, limit) end
    -- claim and ack look for time limits and dependencies once `extras` is set.
    if (limit ~= '0' or deps ~= '') and not extras then
      redis.call('HSET', KEYS[11], 'extras', '1')
      extras = true
    end
    if EVENTS_MAX > 0 then
      if doomed then
        event('dead', id, "dependency '" .. doomed .. "' died")
      else
        event('added', id)
      end
    end
    if status > 0 then out[#out + 1] = status
    elseif cur or flying then out[#out + 1] = 2 else out[#out + 1] = 1 end
    out[#out + 1] = score
    if status == 0 and not flying then added = added + 1 end
  end
end
if any_deps then
  -- The new edges, one write per dependency for the whole batch; a set:
  -- a dependent already listed is not listed again (deps.lua).
  for d, kids in pairs(edges) do DAG().add_edges(d, kids) end
  -- Tasks written dead (a dependency had died): their dependents follow.
  for _, id in ipairs(died_here) do
    local r = DAG().died(id, now)
    added = added + r[1]
  end
end
if bucketed ~= 0 then redis.call('HINCRBY', KEYS[9], 'small', bucketed) end
if added > 0 then wake(added) end
if EVENTS_MAX > 0 then flush_events() end
return out
