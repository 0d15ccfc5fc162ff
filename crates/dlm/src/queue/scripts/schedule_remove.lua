-- schedule_remove: remove a repeating task (tasks it already enqueued stay).
-- KEYS  the three schedule keys of the queue (see schedule_add.lua)
-- ARGV[1]  schedule id
-- Returns  1 removed, 0 there was none
redis.call('HDEL', KEYS[2], ARGV[1])
local had = redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return had
