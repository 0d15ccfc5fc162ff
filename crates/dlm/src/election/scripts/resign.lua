-- resign: step down if we still lead, and wake the candidates.
-- KEYS[1]  the leader's lease (value = owner token)
-- KEYS[2]  the leader hash (id, term, token)
-- ARGV[1]  our owner token
-- ARGV[2]  the channel candidates wait on
-- Returns  1   resigned (the candidates were told)
--          0   the lease is gone: it had run out
--          -1  another candidate leads now
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if cur == false then return 0 end
  return -1
end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], 'token')
redis.call('PUBLISH', ARGV[2], '1')
return 1
