-- fenced_set: store a value only if its fencing token is not lower than the highest seen.
-- KEYS[1]  a hash holding the protected value: fields 'fence' and 'value'
-- ARGV[1]  the writer's fencing token (decimal integer >= 1)
-- ARGV[2]  the value to store
-- Returns  {1, fence}    stored; fence = ARGV[1] is now the highest seen
--          {0, highest}  rejected: a writer with a higher token has written already
local highest = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
local fence = tonumber(ARGV[1])
if fence < highest then
  return {0, highest}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return {1, fence}
