-- extend: set a new TTL on the lock only if it is still ours.
-- KEYS[1]  the lock key
-- ARGV[1]  the owner token
-- ARGV[2]  the new TTL in milliseconds, counted from now (relative, never a timestamp)
-- Returns  1   extended
--          0   the key is gone: the lock had expired
--          -1  the key holds another owner's token: not ours any more
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif v == false then
  return 0
end
return -1
