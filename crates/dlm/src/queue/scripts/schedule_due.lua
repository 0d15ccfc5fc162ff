-- schedule_due: the repeating tasks whose next tick has come (read only;
-- schedule_fire.lua fires them).
-- KEYS  the three schedule keys of the queue (see schedule_add.lua)
-- ARGV[1]  how many due schedules at most
-- Returns  {now (ms, server clock), ms until the earliest tick that is not
--           due yet (-1: none), then per due schedule three values: id,
--           its due tick (ms), its spec}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local later = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
local out = {now, -1}
if later[2] then out[2] = tonumber(later[2]) - now end
for i = 1, #due, 2 do
  out[#out + 1] = due[i]
  out[#out + 1] = tonumber(due[i + 1])
  out[#out + 1] = redis.call('HGET', KEYS[1], due[i]) or ''
end
return out
