-- campaign: become the leader if nobody leads, with a new term.
-- KEYS[1]  the leader's lease (value = owner token, PX = lease)
-- KEYS[2]  the leader hash: id, term, token of the latest leader
-- KEYS[3]  the term counter (never expires)
-- ARGV[1]  our owner token
-- ARGV[2]  the lease in ms
-- ARGV[3]  our candidate id
-- Returns  {1, term}     elected (or already leader with this token: a lost
--                        reply's retry gets the same term back)
--          {0, pttl_ms}  another candidate leads for this long yet
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[2], 'term') or '0')}
end
if cur then
  return {0, redis.call('PTTL', KEYS[1])}
end
local term = redis.call('INCR', KEYS[3])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 'id', ARGV[3], 'term', term, 'token', ARGV[1])
return {1, term}
