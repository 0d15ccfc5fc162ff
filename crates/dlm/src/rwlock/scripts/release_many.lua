-- rw release_many: give back read shares or write locks, each only if it is still ours, in
-- submission order, and wake whoever may enter now. The client batches concurrent releases into
-- one call (rwlock/batch.rs); each is decided exactly as a lone release would be:
--   read:  our share is removed; it counts as released if its lease had not run out.
--   write: the writer key is deleted only if it holds our token (else nothing changes at all).
--   Then, with the expired readers and waiting writers dropped and nobody writing: a live
--   waiting writer is woken (channel "writable") once no live reader is left; with no writer
--   waiting, a writer leaving wakes the readers (channel "readable").
-- Slimmed where provably equivalent (the script runs alone: nothing changes between calls, and
-- no key expires during it: Redis expires by the script's start time):
--   * the writer keys' values are read once (one MGET; a key that holds no string, which no dlm
--     script writes, reads as none) and kept up to date with this script's own DELs;
--   * whether any waiting set of the call exists is asked once (one EXISTS): this script never
--     adds to one, so a set that did not exist at the start is empty, and is not asked about;
--   * a read share is released by dropping the expired shares first and then ZREM of ours: it
--     removes ours only if its lease had not run out (1), as ZSCORE, ZREM and the clean-up did;
--   * expired entries are dropped only when a set has one (its lowest score, ZRANGE 0 0, is the
--     earliest deadline); who reads is asked only when it decides a wake-up (a writer waits);
--   * one TIME per call, taken when first needed.
-- KEYS[3i-2]  release i's writer key
-- KEYS[3i-1]  its readers (sorted set: reader token -> lease deadline, server ms)
-- KEYS[3i]    its waiting writers (sorted set: writer token -> marker deadline, server ms)
--             (on Redis Cluster the caller groups the releases of one call by hash slot)
-- ARGV[4i-3]  'r' to give back a read share, 'w' the write lock
-- ARGV[4i-2]  the owner token
-- ARGV[4i-1]  the channel published when readers may enter
-- ARGV[4i]    the channel published when a writer may enter
-- Returns     per release: 1 released; 0 it was gone (our lease had expired); -1 the write
--             lock holds another owner's token; or, in place of the code, a string: the message
--             of a Redis error on this release alone (e.g. WRONGTYPE: its readers or waiting set
--             holds something else). The other releases of the call are decided and woken
--             regardless: each runs under pcall (a redis.call error would abort the script and
--             fail every release of the call, the ones before it done nonetheless). A read
--             share's release raises before it writes (its ZREMRANGEBYSCORE); a write lock's
--             raises only after its DEL, in the wake-up: it is released, its waiters not woken
--             (as a lone release would have done).
local now
local function clock()
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return now
end
local n = #KEYS / 3
local writer_keys, waiting_keys = {}, {}
for i = 1, n do
  writer_keys[i], waiting_keys[i] = KEYS[3 * i - 2], KEYS[3 * i]
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
local any_waiting = redis.call('EXISTS', unpack(waiting_keys)) > 0
-- Drop the entries of sorted set `key` whose deadline passed; whether a live one is left.
local function any_live(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[1] == nil or tonumber(first[2]) > clock() then
    return first[1] ~= nil
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('EXISTS', key) == 1
end
local out = {}
local function decide(i)
  local writer_key, readers, waiting = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local mode, token = ARGV[4 * i - 3], ARGV[4 * i - 2]
  local code
  if mode == 'r' then
    redis.call('ZREMRANGEBYSCORE', readers, '-inf', clock())
    code = redis.call('ZREM', readers, token)
  else
    local v = writers[writer_key]
    if v == token then
      redis.call('DEL', writer_key)
      writers[writer_key] = false
      code = 1
    elseif v == false then
      code = 0
    else
      code = -1
    end
  end
  out[i] = code
  if mode == 'r' or code == 1 then
    -- (A read share's readers set is clean already; a writer's is cleaned here.)
    local reading = mode == 'w' and any_live(readers)
    local waited = any_waiting and any_live(waiting)
    if not writers[writer_key] then
      if waited then
        if mode == 'r' then
          reading = redis.call('EXISTS', readers) == 1
        end
        if not reading then
          redis.call('PUBLISH', ARGV[4 * i], '1')
        end
      elseif mode == 'w' then
        redis.call('PUBLISH', ARGV[4 * i - 1], '1')
      end
    end
  end
end
for i = 1, n do
  local ok, err = pcall(decide, i)
  if not ok then
    if type(err) == 'table' then err = err.err end
    out[i] = tostring(err)
  end
end
return out
