-- schedule_add: add or change a repeating task of a queue. The same spec
-- again keeps the schedule's next tick (every worker may declare its
-- schedules at start without moving them); a new spec starts on its grid at
-- ARGV[5]. A changed payload alone is stored and keeps the next tick.
-- KEYS (the schedule keys of the queue, all under its {queue} hash tag):
--   1 schedules          HASH  id -> spec ('every <ms>' or 'cron <expr>')
--   2 schedule_payloads  HASH  id -> payload (absent: none)
--   3 schedule_next      ZSET  id -> next tick (ms since the epoch, server clock)
-- ARGV[1]  schedule id
-- ARGV[2]  spec
-- ARGV[3]  '1' with a payload, '0' without
-- ARGV[4]  payload
-- ARGV[5]  first tick if the spec is new (ms)
-- ARGV[6]  the most schedules a queue may have
-- Returns  1 added, 2 changed, 0 unchanged, -1 refused (the queue has the most schedules)
local id = ARGV[1]
local spec = redis.call('HGET', KEYS[1], id)
local next_tick = redis.call('ZSCORE', KEYS[3], id)
local payload = redis.call('HGET', KEYS[2], id)
local want = nil
if ARGV[3] == '1' then want = ARGV[4] end
local function store_payload()
  if want then
    redis.call('HSET', KEYS[2], id, want)
  else
    redis.call('HDEL', KEYS[2], id)
  end
end
if spec == ARGV[2] and next_tick then
  if (payload or false) == (want or false) then
    return 0
  end
  store_payload()
  return 2
end
if not spec and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[6]) then
  return -1
end
redis.call('HSET', KEYS[1], id, ARGV[2])
store_payload()
redis.call('ZADD', KEYS[3], ARGV[5], id)
if spec then return 2 end
return 1
