-- rw acquire_many: one attempt each at one or more read shares or write locks, in submission
-- order. The client batches concurrent attempts into one call (rwlock/batch.rs); each is decided
-- exactly as a lone attempt would be, in this order:
--   read:  a share this token holds already (a lost reply had granted it) is renewed: its lease
--          reset to the TTL from now, a fresh fence; else busy while a writer holds the lock
--          (wait = its PTTL, -1 without expiry) or a live writer waits for it (writer preference;
--          wait = until the first waiting writer's marker runs out); else a new share.
--   write: the write lock this token holds already is renewed (TTL from now, fresh fence); else
--          granted when nobody writes and no live reader holds a share (its waiting marker is
--          dropped); else busy (wait = the writer's PTTL, or until the first reader's lease
--          ends), leaving a waiting marker that keeps new readers out when the caller waits.
-- Every attempt first drops the readers and waiting writers whose lease ran out.
-- Slimmed where provably equivalent (the script runs alone: nothing changes between calls):
--   * What the call reads of every lock it is given, it reads once: the writer keys' values
--     (one MGET), and whether any readers set and any waiting set of the call exists (one EXISTS
--     each); the script keeps these up to date with each write it makes itself. They stay true
--     because nothing else runs while a script runs and no key expires during it (Redis expires
--     by the script's start time). A set that neither existed at the start nor was added to by
--     this call is empty, and is not asked about. (MGET reads a writer key that holds no string,
--     which no dlm script writes, as free.)
--   * Expired entries are dropped only when the set has one: the lowest score (ZRANGE 0 0) is
--     the earliest deadline, so when it is in the future ZREMRANGEBYSCORE -inf now removes
--     nothing.
--   * One TIME per call, taken when first needed: the attempts run as if at one instant, a
--     schedule a one-by-one run could have had (the call is atomic anyway).
--   * Fences are taken after every attempt was decided, one INCRBY n per fencing counter,
--     handed out in grant order: the call is atomic, so the n fences sit above every fence
--     taken before it and below every fence taken after it, and the grants of each lock take
--     them in the order they were granted (a writer's fence still exceeds every earlier share's).
-- KEYS[4i-3]  attempt i's writer key (value = owner token, PX = lease)
-- KEYS[4i-2]  its readers: a sorted set, reader token -> lease deadline (server time, ms)
-- KEYS[4i-1]  its waiting writers: a sorted set, writer token -> marker deadline (server ms)
-- KEYS[4i]    the fencing counter of its hash slot (on Redis Cluster the caller groups the
--             attempts of one call by hash slot)
-- ARGV[4i-3]  'r' (a read share) or 'w' (the write lock)
-- ARGV[4i-2]  the attempt's owner token
-- ARGV[4i-1]  the share's or lock's TTL in milliseconds
-- ARGV[4i]    write: the waiting marker's lease in ms; 0 = try once, leave no marker (read: unused)
-- Returns     a flat array, two entries per attempt, for attempt i at 2i-1 and 2i:
--             1, fence    granted (or renewed, see above)
--             0, wait_ms  busy: how long until it is worth looking again (-1: a writer without
--                         expiry)
--             -4, msg     a Redis error on this attempt alone: msg is what Redis said. Either its
--                         keys are damaged (e.g. WRONGTYPE: its readers or waiting set holds
--                         something else), or its fencing counter holds no integer (every grant
--                         of that counter in the call fails). The other attempts of the call are
--                         decided regardless: each decision runs under pcall, and each counter's
--                         INCRBY under redis.pcall (a redis.call error would abort the script,
--                         failing every attempt of the call, earlier ones granted nonetheless).
--                         Nothing is left held for nobody: a decision's commands that can raise
--                         (the ZRANGE of a set of the wrong type) all come before its first write
--                         (only the clean-up of expired entries, which any call makes, may precede
--                         them), and a grant whose counter fails is undone (its read share or
--                         write lock removed; attempts of the call that found it busy look again
--                         on their own).
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local n = #KEYS / 4
local writer_keys, readers_keys, waiting_keys = {}, {}, {}
for i = 1, n do
  writer_keys[i], readers_keys[i], waiting_keys[i] = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1]
end
local values = redis.pcall('MGET', unpack(writer_keys))
if values.err then
  -- A user whose ACL predates dlm's use of MGET (dlm::keys::ACL_RULES): one GET per key; a
  -- key that holds no string reads as no writer, as MGET reads it (a redis.call error here
  -- would fail every lock of the call).
  values = {}
  for i = 1, n do
    local v = redis.pcall('GET', writer_keys[i])
    values[i] = type(v) ~= 'table' and v
  end
end
-- writer key -> its value (false: none), kept up to date below.
local writers = {}
for i = 1, n do
  writers[writer_keys[i]] = values[i]
end
local any_readers = redis.call('EXISTS', unpack(readers_keys)) > 0
local any_waiting = redis.call('EXISTS', unpack(waiting_keys)) > 0
-- Sets this call added to.
local added = {}
-- Drop the entries of sorted set `key` whose deadline passed; the first live one
-- ({member, score}) or nil when none is left. `any`: whether a set of its kind existed at the
-- call's start.
local function first_live(key, any)
  if not any and not added[key] then
    return nil
  end
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[1] == nil or tonumber(first[2]) > clock() then
    return first[1] and first or nil
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return first[1] and first or nil
end
-- A new or renewed read share: the set's TTL covers the share's lease.
local function add_reader(key, token, ttl, existed)
  redis.call('ZADD', key, clock() + ttl, token)
  added[key] = true
  if not existed or redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
local out, granted, counters = {}, {}, {}
local function grant(i, counter)
  out[2 * i - 1] = 1
  granted[#granted + 1] = i
  counters[counter] = (counters[counter] or 0) + 1
end
local function decide(i)
  local writer_key, readers, waiting, counter = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
  local mode, token, ttl = ARGV[4 * i - 3], ARGV[4 * i - 2], tonumber(ARGV[4 * i - 1])
  local reader = first_live(readers, any_readers)
  local waiter = first_live(waiting, any_waiting)
  if mode == 'r' then
    if reader and redis.call('ZSCORE', readers, token) then
      add_reader(readers, token, ttl, true)
      grant(i, counter)
    elseif writers[writer_key] then
      out[2 * i - 1], out[2 * i] = 0, redis.call('PTTL', writer_key)
    elseif waiter then
      out[2 * i - 1], out[2 * i] = 0, math.max(0, tonumber(waiter[2]) - clock())
    else
      add_reader(readers, token, ttl, reader ~= nil)
      grant(i, counter)
    end
  else
    local writer = writers[writer_key]
    if writer == token then
      redis.call('PEXPIRE', writer_key, ttl)
      grant(i, counter)
    elseif not writer and not reader then
      redis.call('SET', writer_key, token, 'PX', ttl)
      writers[writer_key] = token
      if waiter then
        redis.call('ZREM', waiting, token)
      end
      grant(i, counter)
    else
      local marker = tonumber(ARGV[4 * i])
      if marker > 0 then
        redis.call('ZADD', waiting, clock() + marker, token)
        added[waiting] = true
        if redis.call('PTTL', waiting) < marker then
          redis.call('PEXPIRE', waiting, marker)
        end
      end
      if writer then
        out[2 * i - 1], out[2 * i] = 0, redis.call('PTTL', writer_key)
      else
        out[2 * i - 1], out[2 * i] = 0, math.max(0, tonumber(reader[2]) - clock())
      end
    end
  end
end
-- A Redis error's message (redis.call raises a table {err = ...}).
local function message(err)
  if type(err) == 'table' then err = err.err end
  return tostring(err)
end
for i = 1, n do
  local ok, err = pcall(decide, i)
  if not ok then
    out[2 * i - 1], out[2 * i] = -4, message(err)
  end
end
-- The fences, per counter in grant order.
local next_fence = {}
for counter, n in pairs(counters) do
  local top = redis.pcall('INCRBY', counter, n)
  if type(top) == 'table' then
    next_fence[counter] = message(top)
  else
    next_fence[counter] = top - n + 1
  end
end
for _, i in ipairs(granted) do
  local counter = KEYS[4 * i]
  local f = next_fence[counter]
  if type(f) == 'string' then
    -- No fence: the grant is undone (this token's write lock or read share removed).
    local writer_key, token = KEYS[4 * i - 3], ARGV[4 * i - 2]
    if ARGV[4 * i - 3] == 'r' then
      redis.call('ZREM', KEYS[4 * i - 2], token)
    elseif writers[writer_key] == token then
      redis.call('DEL', writer_key)
      writers[writer_key] = false
    end
    out[2 * i - 1], out[2 * i] = -4, f
  else
    out[2 * i] = f
    next_fence[counter] = f + 1
  end
end
return out
