-- take: decrement a stock counter only if enough is left; never below zero.
-- KEYS[1]  the counter (a string holding an integer; absent = 0)
-- ARGV[1]  how many to take (>= 1)
-- Returns  {1, left}  taken; left is what remains
--          {0, left}  not enough; nothing changed
local left = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[1])
if left < n then
  return {0, left}
end
return {1, redis.call('DECRBY', KEYS[1], n)}
