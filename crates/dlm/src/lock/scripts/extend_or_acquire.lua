-- extend_or_acquire: Redlock's per-node extend. Set a new TTL on the lock if it
-- is still ours, or take it again if the key is gone (a node restarted empty, or
-- our key expired there while the majority still holds it for us).
-- KEYS[1]  the lock key
-- ARGV[1]  the owner token
-- ARGV[2]  the new TTL in milliseconds, counted from now (relative, never a timestamp)
-- Returns  1   extended
--          2   the key was gone and is ours again
--          -1  the key holds another owner's token
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
elseif v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return -1
