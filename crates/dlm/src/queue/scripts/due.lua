-- due: helpers prepended (by ops.rs, after groups.lua and payload.lua) to the
-- scripts of the seeds' API that read or take waiting tasks without a lease:
-- top, pop, remove_if_score. They use the KEYS listed in those scripts'
-- headers and return nothing to the caller by themselves.
-- A task that waits is in one of three places: `waiting` (1, by due time:
-- delayed tasks, and every task of a queue without priorities or groups),
-- `ready` (14, due tasks of a queue with priorities or groups, by claim
-- score) or `parked` (16, due tasks of a group at its limit). These helpers
-- see all three, in the order claim takes them: claim score (-priority *
-- 2^42 + due time), then id; parked tasks, which claim cannot take until a
-- slot of their group frees, come after the others, in the same order.
local PARKED_SCAN = 1000 -- parked tasks read per call at most
-- Where id waits: 'waiting' | 'ready' | 'parked' (nil: it does not wait),
-- its due time (ms) and, when parked, its member in `parked`.
local function where_waits(id)
  local s = redis.call('ZSCORE', KEYS[1], id)
  if s then
    s = tonumber(s)
    if s >= HOLD then s = s - HOLD end -- held replacement (groups.lua): its due time
    return 'waiting', s
  end
  local r = redis.call('ZSCORE', KEYS[14], id)
  local m = (not r) and redis.call('HGET', KEYS[17], id)
  if not r and not m then return nil end
  local p = tonumber(redis.call('HGET', KEYS[12], id) or '0')
  if r then return 'ready', tonumber(r) + p * PRIO_UNIT end
  local at = #m - #id - 17
  return 'parked', tonumber(string.sub(m, at, at + 16)) - PARK_OFFSET + p * PRIO_UNIT, m
end
-- Take id out of the place where_waits found it.
local function unwait(id, place, member)
  if place == 'waiting' then
    redis.call('ZREM', KEYS[1], id)
  elseif place == 'ready' then
    redis.call('ZREM', KEYS[14], id)
  else
    redis.call('ZREM', KEYS[16], member)
    redis.call('HDEL', KEYS[17], id)
  end
end
local function by_claim_order(a, b)
  if a.rank ~= b.rank then return a.rank < b.rank end
  return a.id < b.id
end
-- Up to `count` due tasks (due time <= now) in claim order, each
-- {id, due, rank, place, member}.
local function due_tasks(count, now)
  local out = {}
  if count <= 0 then return out end
  local featured = redis.call('EXISTS', KEYS[12], KEYS[13], KEYS[14], KEYS[16]) > 0
  if not featured then
    local w = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, count)
    for i = 1, #w, 2 do
      out[#out + 1] = {id = w[i], due = tonumber(w[i + 1]), place = 'waiting'}
    end
    return out
  end
  -- Due tasks still in `waiting` (claim moves them to `ready` in its own
  -- batches): as many as claim would move, ranked by their priority.
  local cand = {}
  local w = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, 1000 + 4 * count)
  local r = redis.call('ZRANGE', KEYS[14], 0, count - 1, 'WITHSCORES')
  local ids = {}
  for i = 1, #w, 2 do ids[#ids + 1] = w[i] end
  for i = 1, #r, 2 do ids[#ids + 1] = r[i] end
  local prios = hmget_many(KEYS[12], ids)
  local nw = #w / 2
  for i = 1, nw do
    local due = tonumber(w[2 * i])
    cand[#cand + 1] = {id = w[2 * i - 1], due = due, rank = ready_score(prios[i], due), place = 'waiting'}
  end
  for i = 1, #r / 2 do
    local rank, p = tonumber(r[2 * i]), tonumber(prios[nw + i] or '0')
    cand[#cand + 1] = {id = r[2 * i - 1], due = rank + p * PRIO_UNIT, rank = rank, place = 'ready'}
  end
  table.sort(cand, by_claim_order)
  for i = 1, math.min(count, #cand) do out[i] = cand[i] end
  if #out >= count or redis.call('EXISTS', KEYS[16]) == 0 then return out end
  -- Parked tasks last (claim takes them only once their group has room).
  local members = redis.call('ZRANGE', KEYS[16], 0, PARKED_SCAN - 1)
  local parked, pids = {}, {}
  for _, m in ipairs(members) do
    local sep = string.find(m, '\0', 1, true)
    local rank = tonumber(string.sub(m, sep + 1, sep + 17)) - PARK_OFFSET
    local id = string.sub(m, sep + 19)
    parked[#parked + 1] = {id = id, rank = rank, place = 'parked', member = m}
    pids[#pids + 1] = id
  end
  local ps = hmget_many(KEYS[12], pids)
  for i, t in ipairs(parked) do t.due = t.rank + tonumber(ps[i] or '0') * PRIO_UNIT end
  table.sort(parked, by_claim_order)
  for i = 1, math.min(count - #out, #parked) do out[#out + 1] = parked[i] end
  return out
end
-- A task taken out of the queue for good (popped or removed): forget its
-- attempts, last error, priority, group, payload, run-time limit and
-- progress unless it is also in flight (an id enqueued again while its
-- earlier run holds a lease: that run goes on and keeps them). Returns the
-- ids that are gone for good (not in flight): only these count as completed
-- for their dependents (issue 31: a pop beside a lease is no completion; the
-- run in flight completes the id when it is acked).
local function forget_unless_flying(ids)
  local gone = {}
  -- Issue 24: run-time limits and progress exist only once `extras` is set (results.lua).
  local extras = #ids > 0 and redis.call('HGET', KEYS[11], 'extras')
  for _, id in ipairs(ids) do
    if not redis.call('ZSCORE', KEYS[3], id) then
      gone[#gone + 1] = id
      redis.call('HDEL', KEYS[5], id)
      redis.call('HDEL', KEYS[7], id) -- issue 31: its last error goes with it
      redis.call('HDEL', KEYS[12], id)
      redis.call('HDEL', KEYS[13], id)
      if extras then
        redis.call('HDEL', KEYS[22], id) -- issue 24: its run-time limit
        redis.call('HDEL', KEYS[25], id) -- issue 31: and its last progress
      end
    end
  end
  drop_payloads(gone)
  return gone
end
