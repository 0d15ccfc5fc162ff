-- payload: helpers prepended (by ops.rs and inspect.rs) to the scripts that
-- read, write or delete task payloads: enqueue, claim, ack, pop, top,
-- remove_if_score, purge_dead, dead, tasks. They use KEYS[2] (payload) and
-- KEYS[9] (stats) as listed in those scripts' headers and return nothing to
-- the caller by themselves. Where a task's payload lives:
--   * none (an id-only task): nowhere. The task is its entry in the due-time
--     set and nothing else.
--   * small (payload and id both at most 64 bytes, written by a producer
--     with compact payloads on, Queue::compact_payloads): in one of 4096 bucket hashes
--     KEYS[2] .. ':' .. bucket(id) in three hex digits, under the queue's
--     hash tag (same cluster slot). bucket(id): h = 0, then for each byte
--     b of the id h = (h * 31 + b) mod 1000003; bucket = h mod 4096
--     (dlm::keys::queue_payload_bucket computes the same). A bucket holds about
--     tasks / 4096 entries, so it stays a listpack (Redis' defaults:
--     hash-max-listpack-entries 512, hash-max-listpack-value 64) and a
--     payload costs its bytes plus about 4, not the ~70 bytes of a hashtable
--     entry. Past ~2M small payloads the buckets turn into hashtables: then
--     they cost what the single hash costs.
--   * larger ones, and every payload written by dlm before buckets: in
--     KEYS[2] itself (id -> payload). Readers look there first.
-- KEYS[9] field `small` counts the bucket entries, so a queue with none
-- (id-only tasks, or large payloads only) never computes a bucket.
-- The buckets are declared (issue 31: every key a script touches is in
-- KEYS): KEYS[32..] hold either all 4096 buckets in order (:000 .. :fff;
-- scripts that pick their tasks: claim, pop, top, tasks, dead, purge_dead)
-- or those of the call's ids (enqueue, ack, remove_if_score, task), as
-- queue/keyset.rs sends them. A call without them for a queue that has
-- bucket entries writes nothing and answers the status BUCKETS
-- (needs_buckets); the client calls again with them.
local SMALL_PAYLOAD = 64
local declared_buckets
local function bucket_of(id)
  local h, b = 0, {string.byte(id, 1, -1)}
  for i = 1, #b do h = (h * 31 + b[i]) % 1000003 end
  local n = h % 4096
  local key = KEYS[2] .. ':' .. string.format('%03x', n)
  if #KEYS == 31 + 4096 then
    if KEYS[32 + n] == key then return key end
  else
    if not declared_buckets then
      declared_buckets = {}
      for i = 32, #KEYS do declared_buckets[KEYS[i]] = true end
    end
    if declared_buckets[key] then return key end
  end
  -- A client that sent the wrong buckets: refuse rather than touch an undeclared key.
  error('dlm: payload bucket ' .. key .. ' is not declared in KEYS')
end
local small_read
-- How many payloads are in buckets (read once per call: no script reads it
-- again after changing it).
local function small_count()
  if not small_read then small_read = tonumber(redis.call('HGET', KEYS[9], 'small') or '0') end
  return small_read
end
-- Whether this call must answer BUCKETS before it touches anything: no
-- bucket keys were sent, the queue has bucket entries (or `writes`: the
-- call writes some) and `ids` (a list; nil: any task, the script picks
-- them) has one that may be in a bucket (at most 64 bytes).
local function needs_buckets(ids, writes)
  if #KEYS > 31 then return false end
  if not writes and small_count() == 0 then return false end
  if not ids then return true end
  for _, id in ipairs(ids) do
    if #id <= SMALL_PAYLOAD then return true end
  end
  return false
end
-- The payloads of `ids` (a list; false: none), in order. `small`: whether
-- the queue has payloads in buckets (small_count() > 0).
local function payloads_of(ids, small)
  local all = {}
  for i = 1, #ids, 2000 do
    local part = redis.call('HMGET', KEYS[2], unpack(ids, i, math.min(i + 1999, #ids)))
    for k = 1, #part do all[i + k - 1] = part[k] end
  end
  if small then
    for i, id in ipairs(ids) do
      if not all[i] and #id <= SMALL_PAYLOAD then all[i] = redis.call('HGET', bucket_of(id), id) end
    end
  end
  return all
end
-- Delete the payloads of `ids` (a list), wherever they are.
local function drop_payloads(ids)
  if #ids == 0 then return end
  for i = 1, #ids, 2000 do
    redis.call('HDEL', KEYS[2], unpack(ids, i, math.min(i + 1999, #ids)))
  end
  if small_count() > 0 then
    local n = 0
    for _, id in ipairs(ids) do
      if #id <= SMALL_PAYLOAD then n = n + redis.call('HDEL', bucket_of(id), id) end
    end
    if n > 0 then redis.call('HINCRBY', KEYS[9], 'small', -n) end
  end
end
-- Store `p` (bytes; false: no payload) as id's payload. `old`: the id may
-- have a payload already (it was waiting, in flight or dead), which goes;
-- `small`: whether any bucket entry may exist; `compact`: a small payload
-- goes to its bucket (else to KEYS[2]). Returns the change in the number
-- of bucket entries (the caller adds them up into KEYS[9] `small`).
local function put_payload(id, p, old, small, compact)
  local n = 0
  local in_bucket = compact and p and #p <= SMALL_PAYLOAD and #id <= SMALL_PAYLOAD
  if old then
    if in_bucket or not p then redis.call('HDEL', KEYS[2], id) end
    if small and not in_bucket and #id <= SMALL_PAYLOAD then
      n = -redis.call('HDEL', bucket_of(id), id)
    end
  end
  if in_bucket then
    n = n + redis.call('HSET', bucket_of(id), id, p)
  elseif p then
    redis.call('HSET', KEYS[2], id, p)
  end
  return n
end
