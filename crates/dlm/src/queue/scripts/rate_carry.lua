-- rate_carry: carry a sharded queue's rate-limit starts from one shard's log
-- to another's when K changes (issue 35; docs/sharded-queue.md, section 4),
-- so that a window that spans the change never holds more than the queue's
-- limit. Starts are carried as ages (ms before now, read on the source
-- shard's clock and stamped on the target's), never as clock times, so the
-- masters' clocks need not agree. A carried entry expires when its original
-- would have (later by the transit time between the two calls: safe).
-- KEYS[1]  the shard's `rate` log (ZSET, key 18: fence -> claim time, ms)
-- ARGV[1]  'read': the source shard
--   ARGV[2]  the limit's period (ms): entries older than that are out of
--            the window
--   ARGV[3]  keep: how many of the window's newest entries stay charged to
--            this shard (its new share on a raise; 0 for a removed shard)
--   Returns  the ages (ms, oldest first) of the window's oldest entries
--            beyond `keep` (an empty list: nothing to carry)
-- ARGV[1]  'seed': the target shard
--   ARGV[2]  a member prefix unique to this change and source (members are
--            PREFIX:index; a claim's own members are fences, numbers)
--   ARGV[3..] ages (ms), as 'read' returned them
--   Returns  the number of entries added
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[1] == 'read' then
  local period, keep = tonumber(ARGV[2]), tonumber(ARGV[3])
  local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. (now - period), '+inf', 'WITHSCORES')
  local n = #live / 2
  local out = {}
  for i = 1, n - keep do
    out[#out + 1] = math.max(0, now - tonumber(live[2 * i]))
  end
  return out
end
if ARGV[1] == 'seed' then
  local add = {}
  for i = 3, #ARGV do
    add[#add + 1] = now - tonumber(ARGV[i])
    add[#add + 1] = ARGV[2] .. ':' .. (i - 2)
  end
  for i = 1, #add, 1000 do
    redis.call('ZADD', KEYS[1], unpack(add, i, math.min(i + 999, #add)))
  end
  return #add / 2
end
return redis.error_reply('ERR rate_carry: unknown operation ' .. tostring(ARGV[1]))
