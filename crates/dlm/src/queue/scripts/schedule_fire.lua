-- schedule_fire: fire due ticks exactly once. For each schedule whose next
-- tick still equals the tick the caller saw due (and whose spec is
-- unchanged), enqueue the task 'ID@TICK' due now and move the next tick on,
-- in one step: a tick is fired by one caller only, however many workers or
-- schedulers run, and its task id carries the tick. A task with that id
-- still waiting or in flight is kept as it is (OnDuplicate::Keep).
-- KEYS 1-3   the schedule keys of the queue (see schedule_add.lua)
-- KEYS 4-13  the queue's ten keys in queue_keys' order (see enqueue.lua):
--            waiting, payload, inflight, lease, attempts, dead, errors,
--            fence, stats, signal. The task is written as enqueue.lua
--            writes one; keep the two in step.
-- ARGV  per schedule four values: id, the due tick seen (ms), the next
--       tick to set (ms), the spec seen
-- Returns  per schedule 1 fired, 0 fired by another caller or changed meanwhile
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiting, payloads, inflight = KEYS[4], KEYS[5], KEYS[6]
local attempts, dead, errors, signal = KEYS[8], KEYS[9], KEYS[10], KEYS[13]
local out, added = {}, 0
for i = 1, #ARGV, 4 do
  local id, tick = ARGV[i], ARGV[i + 1]
  local cur = redis.call('ZSCORE', KEYS[3], id)
  if cur and tonumber(cur) == tonumber(tick) and redis.call('HGET', KEYS[1], id) == ARGV[i + 3] then
    local task = id .. '@' .. tick
    if not redis.call('ZSCORE', waiting, task) and not redis.call('ZSCORE', inflight, task) then
      redis.call('ZADD', waiting, now, task)
      local payload = redis.call('HGET', KEYS[2], id)
      if payload then
        redis.call('HSET', payloads, task, payload)
      else
        redis.call('HDEL', payloads, task)
      end
      redis.call('HDEL', attempts, task)
      redis.call('ZREM', dead, task)
      redis.call('HDEL', errors, task)
      added = added + 1
    end
    redis.call('ZADD', KEYS[3], ARGV[i + 2], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
if added > 0 then
  local marks = {}
  for _ = 1, math.min(added, 64) do marks[#marks + 1] = '1' end
  redis.call('LPUSH', signal, unpack(marks))
  redis.call('LTRIM', signal, 0, 63)
end
return out
