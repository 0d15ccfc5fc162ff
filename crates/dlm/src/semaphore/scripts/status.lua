-- status: what an observer can know about a semaphore, in one round trip (writes nothing).
-- KEYS[1]  the semaphore's hash: `permits` (the capacity), `fence` (the fencing counter)
-- KEYS[2]  the holders' sorted set (one member TOKEN:i per permit, scored by lease deadline)
-- ARGV     none
-- Returns  {capacity, in_use, holders, fence}
--          capacity  the stored capacity (-1: never set)
--          in_use    permits whose lease has not run out
--          holders   distinct holders among them
--          fence     the last fencing token handed out (0: none yet)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')
local seen, holders = {}, 0
for _, member in ipairs(live) do
  local token = string.match(member, '^(.*):%d+$') or member
  if not seen[token] then
    seen[token] = true
    holders = holders + 1
  end
end
local meta = redis.call('HMGET', KEYS[1], 'permits', 'fence')
return {tonumber(meta[1] or '-1'), #live, holders, tonumber(meta[2] or '0')}
