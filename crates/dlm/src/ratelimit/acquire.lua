-- acquire: grant one slot of a sliding-window rate limit when fewer than n
-- grants lie in the last `period` (server clock), else say when one frees.
-- Exact: a grant at time t is given only if the window (t - period, t]
-- held fewer than n grants, so no window of length period ever holds more
-- than n (the log is the exact history, not an estimate).
-- KEYS[1]  the log: ZSET unique member -> grant time (µs since the epoch)
-- ARGV[1]  n: grants allowed in any window of length period (>= 1)
-- ARGV[2]  period in µs (>= 1)
-- ARGV[3]  a member unique to this request (a random token)
-- Returns  {1, now}        granted at `now` (µs, server clock)
--          {0, wait, now}  refused; the oldest grant that keeps the window
--                          full leaves it in `wait` µs (>= 1)
-- Numbers are passed to Redis with '%d': Lua's default number format keeps
-- only 14 digits, and a time in µs has 16.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local n, period = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - period))
local count = redis.call('ZCARD', KEYS[1])
if count < n then
  redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[3])
  redis.call('PEXPIRE', KEYS[1], string.format('%d', math.ceil(period / 1000) + 1))
  return {1, now}
end
-- The (count - n + 1)-th oldest grant must leave before the window has room
-- (count > n only if clients disagree on n).
local oldest = redis.call('ZRANGE', KEYS[1], count - n, count - n, 'WITHSCORES')
local wait = tonumber(oldest[2]) + period - now
if wait < 1 then wait = 1 end
return {0, wait, now}
