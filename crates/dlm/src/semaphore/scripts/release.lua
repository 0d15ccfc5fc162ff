-- release: give back a holder's permits and wake the waiters.
-- KEYS[1]  the holders' sorted set (one member TOKEN:i per permit, scored by lease deadline)
-- ARGV[1]  the holder's token
-- ARGV[2]  how many permits it holds
-- ARGV[3]  the semaphore's wake-up channel (same hash tag)
-- Returns  1  released (and a message published on the channel)
--          0  its leases had run out already (expired; what was left of them is removed)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1] .. ':1')
for i = 1, tonumber(ARGV[2]) do
  redis.call('ZREM', KEYS[1], ARGV[1] .. ':' .. i)
end
if score and tonumber(score) > now then
  redis.call('PUBLISH', ARGV[3], 'released')
  return 1
end
return 0
