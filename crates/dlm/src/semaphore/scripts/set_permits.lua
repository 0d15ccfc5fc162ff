-- set_permits: change a semaphore's capacity. Current holders keep their permits (a lowered
-- capacity is reached as they release); new acquisitions wait until theirs fit. Waiters are woken,
-- since a raised capacity may let them in.
-- KEYS[1]  the semaphore's hash: `permits` (the capacity), `fence` (the fencing counter)
-- ARGV[1]  the new capacity
-- ARGV[2]  the semaphore's wake-up channel (same hash tag)
-- Returns  the previous capacity (-1: never set)
local old = tonumber(redis.call('HGET', KEYS[1], 'permits') or '-1')
redis.call('HSET', KEYS[1], 'permits', ARGV[1])
redis.call('PUBLISH', ARGV[2], 'capacity')
return old
