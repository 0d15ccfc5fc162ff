-- enqueue: add tasks due at now + delay; an id already waiting or in flight is
-- kept (mode 'keep') or replaced (mode 'replace': new due time and payload).
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
--  28 deps      HASH  id -> its dependencies (JSON array), until it finishes
--  29 children  HASH  id -> the tasks waiting for it (JSON array)
--  30 depfail   HASH  id -> 'ignore' (what a dependency's death does; default fail)
--  31 events    STREAM the queue's event log, capped (XADD MAXLEN ~)
-- ARGV[1]  delay in ms (>= 0)
-- ARGV[2]  'keep' or 'replace'
-- ARGV[3]  '1': small payloads go to their bucket (compact), '0': to `payload`
-- ARGV[4..] per task six values: id, '1' with payload / '0' without, payload,
--          priority (integer, '0': none), group ('': none), run-time limit in
--          ms ('0': none; issue 24, kept in `timeout`)
-- A task with a priority or a group that is due now goes to `ready`; so does
-- every task due now once the queue has such tasks (claim orders `ready`).
-- Returns  per task two values: status (1 added, 0 kept as it was, 2 replaced),
--          and the task's due time (ms; -1 for a kept task that is in flight)
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = now + tonumber(ARGV[1])
local replace = ARGV[2] == 'replace'
local featured = redis.call('EXISTS', KEYS[12], KEYS[13], KEYS[14]) > 0
local out, added = {}, 0
-- Payloads: see payload.lua (small ones in buckets, counted in stats `small`).
local small, bucketed = small_count() > 0, 0
local compact = ARGV[3] == '1'
-- Issue 24: whether `extras` (see results.lua) was set by this call.
local extras = false
for i = 4, #ARGV, 6 do
  local id, prio, group = ARGV[i], ARGV[i + 3], ARGV[i + 4]
  local cur = redis.call('ZSCORE', KEYS[1], id)
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
  if (cur or flying) and not replace then
    out[#out + 1] = 0
    out[#out + 1] = tonumber(cur or -1)
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
    if featured and score <= now then
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZADD', KEYS[14], ready_score(prio, score), id)
    else
      redis.call('ZADD', KEYS[1], score, id)
    end
    local was_dead = redis.call('ZREM', KEYS[6], id) == 1
    local delta = put_payload(id, ARGV[i + 1] == '1' and ARGV[i + 2], cur or flying or was_dead, small, compact)
    if delta > 0 then small = true end
    bucketed = bucketed + delta
    if not cur then
      redis.call('HDEL', KEYS[5], id)
    end
    redis.call('HDEL', KEYS[7], id)
    -- Issue 24: the new run's time limit replaces the earlier one's.
    if cur or flying or was_dead then redis.call('HDEL', KEYS[22], id) end
    if ARGV[i + 5] ~= '0' then
      redis.call('HSET', KEYS[22], id, ARGV[i + 5])
      if not extras then
        redis.call('HSET', KEYS[11], 'extras', '1')
        extras = true
      end
    end
    if cur or flying then out[#out + 1] = 2 else out[#out + 1] = 1 end
    out[#out + 1] = score
    added = added + 1
  end
end
if bucketed ~= 0 then redis.call('HINCRBY', KEYS[9], 'small', bucketed) end
if added > 0 then wake(added) end
return out
