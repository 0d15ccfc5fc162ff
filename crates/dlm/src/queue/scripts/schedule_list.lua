-- schedule_list: a queue's repeating tasks, soonest next tick first.
-- KEYS  the three schedule keys of the queue (see schedule_add.lua)
-- ARGV[1]  how many at most
-- Returns  per schedule four values: id, next tick (ms), spec, payload (nil: none)
local next = redis.call('ZRANGE', KEYS[3], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #next, 2 do
  local id = next[i]
  out[#out + 1] = id
  out[#out + 1] = tonumber(next[i + 1])
  out[#out + 1] = redis.call('HGET', KEYS[1], id)
  out[#out + 1] = redis.call('HGET', KEYS[2], id)
end
return out
