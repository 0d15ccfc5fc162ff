-- groups: helpers prepended (by ops.rs) to the scripts that enqueue, start or
-- end a lease: enqueue, claim, ack, nack, abandon. They use the KEYS listed
-- in those scripts' headers and return nothing to the caller by themselves.
-- A due task with a priority or a group waits in `ready` (14), scored
-- -priority * 2^42 + due time: a lower score is claimed first, so higher
-- priorities first and FIFO by due time within one. 0 <= priority <= 1000 and
-- due times below 2^42 ms (the year 2109) keep every score an exact double.
local PRIO_UNIT = 4398046511104 -- 2^42
local PARK_OFFSET = 4503599627370496 -- 2^52: parked scores are written positive
-- HMGET of many fields, in chunks (Lua's unpack() takes a few thousand).
local function hmget_many(key, fields)
  local all = {}
  for i = 1, #fields, 2000 do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 1999, #fields)))
    for k = 1, #part do all[#all + 1] = part[k] end
  end
  return all
end
local function ready_score(prio, due)
  return due - (tonumber(prio) or 0) * PRIO_UNIT
end
local function wake(n)
  local marks = {}
  for _ = 1, math.min(n, 64) do marks[#marks + 1] = '1' end
  redis.call('LPUSH', KEYS[10], unpack(marks))
  redis.call('LTRIM', KEYS[10], 0, 63)
end
-- Hold a due task of a group at its limit aside (no head-of-line blocking).
local function park(g, score, id)
  local m = g .. '\0' .. string.format('%017.0f', score + PARK_OFFSET) .. '\0' .. id
  redis.call('ZADD', KEYS[16], 0, m)
  redis.call('HSET', KEYS[17], id, m)
end
-- n tasks of group g left flight: free their slots and bring parked tasks
-- of g back to `ready`, as many as the group's limit k now allows (at most
-- 64; k = 0: no limit). `parked`: whether any task is parked at all.
local function free_slots(g, n, k, parked)
  local left = redis.call('HINCRBY', KEYS[15], g, -n)
  if left <= 0 then
    redis.call('HDEL', KEYS[15], g)
    left = 0
  end
  if not parked then return end
  local room = 64
  if k > 0 then room = math.min(64, k - left) end
  if room <= 0 then return end
  local members = redis.call('ZRANGEBYLEX', KEYS[16], '[' .. g .. '\0', '(' .. g .. '\1', 'LIMIT', 0, room)
  local at = #g + 2
  for _, m in ipairs(members) do
    local score = tonumber(string.sub(m, at, at + 16)) - PARK_OFFSET
    local id = string.sub(m, at + 18)
    redis.call('ZADD', KEYS[14], score, id)
    redis.call('ZREM', KEYS[16], m)
    redis.call('HDEL', KEYS[17], id)
  end
  if #members > 0 then wake(#members) end
end
-- Tasks of the groups in `groups` (a list, false for no group) left flight.
local function release_all(groups)
  local per, any = {}, false
  for _, g in pairs(groups) do
    if g then
      per[g] = (per[g] or 0) + 1
      any = true
    end
  end
  if not any then return end
  local k = tonumber(redis.call('HGET', KEYS[11], 'group_concurrency') or '0')
  local parked = redis.call('EXISTS', KEYS[16]) == 1
  for g, n in pairs(per) do free_slots(g, n, k, parked) end
end
-- A task of group g left flight.
local function release(g)
  release_all({g})
end
-- The group of each id (false: none), without a call when no task has one.
local function groups_of(ids)
  local out = {}
  if #ids == 0 or redis.call('EXISTS', KEYS[13]) == 0 then return out end
  for i = 1, #ids, 2000 do
    local part = redis.call('HMGET', KEYS[13], unpack(ids, i, math.min(i + 1999, #ids)))
    for k = 1, #part do out[i + k - 1] = part[k] end
  end
  return out
end
-- Is id waiting in `ready` or parked (enqueued again while in flight)?
local function in_ready(id)
  return redis.call('ZSCORE', KEYS[14], id) or redis.call('HEXISTS', KEYS[17], id) == 1
end
-- Issue 31: a replacement of a task in flight (enqueue 'replace') is held:
-- it waits in `waiting` scored HOLD + its due time, out of every claim's
-- reach (no due time comes near 2^52), until the run it replaces settles
-- (ack, nack, lease expiry, abandon). So an id is never leased twice at
-- once and takes one slot of its group. Readers of `waiting` scores
-- subtract HOLD from a score at or above it.
local HOLD = 4503599627370496 -- 2^52
-- The run of id settled; `s` is id's score in `waiting` (nil/false: none).
-- A held replacement becomes due at its own due time. Returns whether id
-- waits in `waiting` (held or not).
local function unhold(id, s)
  if not s then return false end
  s = tonumber(s)
  if s >= HOLD then
    redis.call('ZADD', KEYS[1], s - HOLD, id)
    wake(1)
  end
  return true
end
