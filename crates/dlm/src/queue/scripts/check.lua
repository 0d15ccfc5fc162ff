-- check: read a queue's state and report every place where it breaks the
-- invariants the other scripts keep (Queue::check_invariants, dlm queue
-- check). Read only: nothing is written, nothing moves.
-- KEYS: the queue's thirty-one keys, in the order enqueue.lua's header lists
-- them (all sharing the {queue} hash tag), then its 4096 payload bucket
-- hashes KEYS[2] .. ':000' ..= ':fff' (payload.lua), so that every key the
-- script reads is declared.
-- ARGV[1]  the most ids read from one key (a larger key is read in part: the
--          reply then says the check is incomplete, and the checks that need
--          a whole key, the group counts and the dependency edges, are
--          skipped for it)
-- ARGV[2]  the most violations returned (more: incomplete)
-- The invariants (names as returned; Invariant in check.rs documents them):
--   one_state    an id is in at most one of waiting, ready, parked; blocked
--                and dead exclude every other state; in flight may coexist
--                with one queued copy (the id enqueued again meanwhile)
--   lease        `lease` has an entry exactly for the ids in flight, each a
--                fence the counter `fence` has handed out
--   group_count  `gcount` g equals the number of ids in flight whose group is
--                g, and holds no entry <= 0 (an id is counted once)
--   attempts     every `attempts` entry is an integer >= 0, and >= 1 for an
--                id in flight (its run counts)
--   parked       `parked` and `parkedid` name each other
--   pending      a blocked id has `pending` >= 1, equal to the number of
--                ids whose `children` list it (its dependencies not done
--                yet); no `pending` entry for an id that is not blocked
--   edge         a `children` list names each dependent once, only blocked
--                ones, whose `deps` name the parent, and no dead parent has one
--   orphan       what a task leaves (payload, prio, group, timeout: while
--                alive or dead; errors, progress, attempts, deps, depfail:
--                also while its completion is remembered in `done` or
--                `completed`; results: while in `done`) belongs to an id
--                that is in such a state
--   small_count  `stats` field small equals the entries of the buckets
-- Returns  {complete (1 or 0), now (ms), then the counts: waiting (due now,
--           in `waiting` or `ready`), delayed, parked, in flight, blocked,
--           dead, done (completions remembered), then per violation three
--           values: invariant, id (a group's name for group_count, '' for
--           small_count), detail}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local CAP = tonumber(ARGV[1])
local MAXV = tonumber(ARGV[2])
local complete = true
local found, nfound = {}, 0
local function violation(inv, id, detail)
  nfound = nfound + 1
  if nfound > MAXV then
    complete = false
    return
  end
  found[#found + 1] = inv
  found[#found + 1] = id
  found[#found + 1] = detail
end

-- Members of a sorted set, at most CAP (true: all of them).
local function members(key)
  local n = redis.call('ZCARD', key)
  if n > CAP then complete = false end
  return redis.call('ZRANGE', key, 0, CAP - 1), n <= CAP
end
-- Fields (and values when `values`) of a hash, at most CAP fields (true:
-- all of them). Values are read only from hashes of small values.
local function fields(key, values)
  local n = redis.call('HLEN', key)
  if n <= CAP then
    if values then return redis.call('HGETALL', key), true end
    return redis.call('HKEYS', key), true
  end
  complete = false
  local out, cursor, got = {}, '0', 0
  repeat
    local r = redis.call('HSCAN', key, cursor, 'COUNT', 100)
    cursor = r[1]
    for i = 1, #r[2], 2 do
      if got < CAP then
        got = got + 1
        out[#out + 1] = r[2][i]
        if values then out[#out + 1] = r[2][i + 1] end
      end
    end
  until cursor == '0' or got >= CAP
  return out, false
end

-- Where an id is (memoised): waiting, ready, parked, flight, blocked, dead.
local where = {}
local function state(id)
  local s = where[id]
  if s then return s end
  s = {
    waiting = redis.call('ZSCORE', KEYS[1], id) ~= false,
    ready = redis.call('ZSCORE', KEYS[14], id) ~= false,
    parked = redis.call('HEXISTS', KEYS[17], id) == 1,
    flight = redis.call('ZSCORE', KEYS[3], id) ~= false,
    blocked = redis.call('ZSCORE', KEYS[26], id) ~= false,
    dead = redis.call('ZSCORE', KEYS[6], id) ~= false,
  }
  s.queued = s.waiting or s.ready or s.parked
  s.alive = s.queued or s.flight or s.blocked
  where[id] = s
  return s
end
local function remembered(id)
  return redis.call('ZSCORE', KEYS[24], id) ~= false or redis.call('ZSCORE', KEYS[19], id) ~= false
end
local NAMES = {'waiting', 'ready', 'parked', 'flight', 'blocked', 'dead'}
local function describe(s)
  local parts = {}
  for _, name in ipairs(NAMES) do
    if s[name] then parts[#parts + 1] = (name == 'flight') and 'in flight' or name end
  end
  if #parts == 0 then return 'in no state' end
  return table.concat(parts, ' and ')
end
local function split_ids(s)
  local out = {}
  if not s then return out end
  for id in string.gmatch(s, '([^%z]*)%z') do out[#out + 1] = id end
  return out
end
local function is_count(v, least)
  local n = tonumber(v)
  return n ~= nil and n == math.floor(n) and n >= least
end

-- one_state: every id of a state key, once.
local seen = {}
local function one_state(id)
  if seen[id] then return end
  seen[id] = true
  local s = state(id)
  local queued = (s.waiting and 1 or 0) + (s.ready and 1 or 0) + (s.parked and 1 or 0)
  local others = queued + (s.flight and 1 or 0)
  if queued > 1 or ((s.blocked or s.dead) and (others > 0 or (s.blocked and s.dead))) then
    violation('one_state', id, describe(s))
  end
end
local inflight, all_inflight = members(KEYS[3])
for _, key in ipairs({KEYS[1], KEYS[14], KEYS[26], KEYS[6]}) do
  for _, id in ipairs((members(key))) do one_state(id) end
end
for _, id in ipairs(inflight) do one_state(id) end
local parkedid = fields(KEYS[17], true)
for i = 1, #parkedid, 2 do one_state(parkedid[i]) end

-- lease: exactly the ids in flight, with fences handed out.
local fence_max = tonumber(redis.call('GET', KEYS[8]) or '0') or 0
for _, id in ipairs(inflight) do
  local lease = redis.call('HGET', KEYS[4], id)
  if not lease then
    violation('lease', id, 'in flight without a lease')
  elseif not is_count(lease, 1) or tonumber(lease) > fence_max then
    violation('lease', id, 'lease fence ' .. lease .. ' was never handed out (counter at ' .. fence_max .. ')')
  end
end
for _, id in ipairs((fields(KEYS[4], false))) do
  if not state(id).flight then
    violation('lease', id, 'a lease of a task that is not in flight (' .. describe(state(id)) .. ')')
  end
end

-- group_count: one slot per id in flight, in its group.
local gcount, all_gcount = fields(KEYS[15], true)
if all_inflight and all_gcount then
  local per, first = {}, {}
  if redis.call('EXISTS', KEYS[13]) == 1 then
    for _, id in ipairs(inflight) do
      local g = redis.call('HGET', KEYS[13], id)
      if g then
        per[g] = (per[g] or 0) + 1
        first[g] = first[g] or id
      end
    end
  end
  local counted = {}
  for i = 1, #gcount, 2 do
    local g, v = gcount[i], gcount[i + 1]
    counted[g] = true
    local n = per[g] or 0
    if not is_count(v, 1) or tonumber(v) ~= n then
      violation('group_count', g, 'counted ' .. v .. ' in flight, but ' .. n .. ' task(s) of the group are in flight')
    end
  end
  for g, n in pairs(per) do
    if not counted[g] then
      violation('group_count', g, 'counted 0 in flight, but ' .. n .. ' task(s) of the group are in flight (' .. first[g] .. ')')
    end
  end
end

-- attempts: counts, and at least the current run's for an id in flight.
local attempts = fields(KEYS[5], true)
for i = 1, #attempts, 2 do
  if not is_count(attempts[i + 1], 0) then
    violation('attempts', attempts[i], 'attempts is ' .. attempts[i + 1])
  end
end
for _, id in ipairs(inflight) do
  local a = redis.call('HGET', KEYS[5], id)
  if is_count(a or '0', 0) and tonumber(a or '0') < 1 then
    violation('attempts', id, 'in flight with ' .. (a or 'no') .. ' attempts counted')
  end
end

-- parked: the member and its index name each other.
for i = 1, #parkedid, 2 do
  local id, m = parkedid[i], parkedid[i + 1]
  if redis.call('ZSCORE', KEYS[16], m) == false then
    violation('parked', id, 'parkedid names a member that is not in parked')
  elseif string.sub(m, -(#id + 1)) ~= '\0' .. id then
    violation('parked', id, 'parkedid names the member of another id')
  end
end
for _, m in ipairs((members(KEYS[16]))) do
  local sep = string.find(m, '\0', 1, true)
  local id = sep and string.sub(m, sep + 19) or m
  if redis.call('HGET', KEYS[17], id) ~= m then
    violation('parked', id, 'a parked member without its parkedid entry')
  end
end

-- edge and pending: the dependency graph.
local children, all_children = fields(KEYS[29], true)
local edges = {}
for i = 1, #children, 2 do
  local p, listed = children[i], {}
  local dead_parent = state(p).dead
  for _, c in ipairs(split_ids(children[i + 1])) do
    if listed[c] then
      if listed[c] == 1 then
        violation('edge', c, "listed more than once as a dependent of '" .. p .. "'")
      end
      listed[c] = listed[c] + 1
    else
      listed[c] = 1
      edges[c] = (edges[c] or 0) + 1
      local s = state(c)
      if not s.blocked then
        violation('edge', c, "a dependent of '" .. p .. "' that is not blocked (" .. describe(s) .. ')')
      else
        local named = false
        for _, d in ipairs(split_ids(redis.call('HGET', KEYS[28], c))) do
          if d == p then named = true end
        end
        if not named then
          violation('edge', c, "listed as a dependent of '" .. p .. "', whose dependencies do not name it")
        end
        if dead_parent then
          violation('edge', c, "still held back by '" .. p .. "', which is dead")
        end
      end
    end
  end
end
for _, c in ipairs((members(KEYS[26]))) do
  local pending = redis.call('HGET', KEYS[27], c)
  if not is_count(pending or '0', 1) then
    violation('pending', c, 'blocked with pending ' .. (pending or 'missing'))
  elseif all_children and tonumber(pending) ~= (edges[c] or 0) then
    violation('pending', c, 'pending ' .. pending .. ', but ' .. (edges[c] or 0) .. ' dependencies still hold it back')
  end
end
for _, c in ipairs((fields(KEYS[27], false))) do
  if not state(c).blocked then
    violation('pending', c, 'a pending count of a task that is not blocked (' .. describe(state(c)) .. ')')
  end
end

-- orphan: what a task leaves, of an id that is in no state that keeps it.
local function orphans(key, what, keep)
  for _, id in ipairs((fields(key, false))) do
    local s = state(id)
    local ok = s.alive or s.dead
    if keep == 'remembered' and not ok then ok = remembered(id) end
    if keep == 'done' then ok = redis.call('ZSCORE', KEYS[24], id) ~= false end
    if not ok and keep == 'done' then
      violation('orphan', id, what .. ' of a task whose completion is not remembered in done')
    elseif not ok then
      violation('orphan', id, what .. ' of a task that is ' .. describe(s)
        .. ((keep == 'alive') and '' or ' and not remembered as done'))
    end
  end
end
orphans(KEYS[2], 'payload', 'alive')
orphans(KEYS[12], 'priority', 'alive')
orphans(KEYS[13], 'group', 'alive')
orphans(KEYS[22], 'time limit', 'alive')
orphans(KEYS[7], 'error', 'remembered')
orphans(KEYS[25], 'progress', 'remembered')
orphans(KEYS[5], 'attempts', 'remembered')
orphans(KEYS[28], 'dependencies', 'remembered')
orphans(KEYS[30], 'dependency policy', 'remembered')
orphans(KEYS[23], 'result', 'done')

-- small_count and the buckets' orphans (KEYS[32..]).
-- Which buckets exist, in a few EXISTS calls (most queues have none).
local buckets = 0
for i = 32, #KEYS, 1000 do
  buckets = buckets + redis.call('EXISTS', unpack(KEYS, i, math.min(i + 999, #KEYS)))
end
local small = tonumber(redis.call('HGET', KEYS[9], 'small') or '0') or 0
if buckets == 0 and small ~= 0 then
  violation('small_count', '', 'stats small is ' .. small .. ', but the buckets hold 0 payloads')
elseif buckets > 0 then
  local total, budget = 0, CAP
  for b = 32, #KEYS do
    local n = redis.call('HLEN', KEYS[b])
    total = total + n
    if n > 0 then
      if n > budget then
        complete = false
      else
        budget = budget - n
        for _, id in ipairs(redis.call('HKEYS', KEYS[b])) do
          local s = state(id)
          if not (s.alive or s.dead) then
            violation('orphan', id, 'payload (in a bucket) of a task that is ' .. describe(s))
          end
        end
      end
    end
  end
  if small ~= total then
    violation('small_count', '', 'stats small is ' .. small .. ', but the buckets hold ' .. total .. ' payloads')
  end
end

local out = {
  complete and 1 or 0, now,
  redis.call('ZCOUNT', KEYS[1], '-inf', now) + redis.call('ZCARD', KEYS[14]),
  redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf'),
  redis.call('HLEN', KEYS[17]),
  redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[26]),
  redis.call('ZCARD', KEYS[6]),
  redis.call('ZCOUNT', KEYS[24], '(' .. now, '+inf'),
}
for _, v in ipairs(found) do out[#out + 1] = v end
return out
