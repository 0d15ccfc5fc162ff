-- layout: change the shard layout of a queue (issue 35; docs/sharded-queue.md,
-- sections 1 and 7). One call touches one shard's `config` hash.
-- KEYS[1]  the `config` hash (key 11 of a shard's keys): shard 0's for
--          'commit', shard i's for 'bump'
-- ARGV[1]  'commit': a compare-and-set of the layout on shard 0
--   ARGV[2]  the version the caller read (its `layout` field; 0: absent)
--   ARGV[3]  the new version
--   ARGV[4]  K, the shards new tasks are placed over
--   ARGV[5]  the tag numbers of shards 1.. (comma list; '' none)
--   ARGV[6]  while a lowering drains, the number of shards before it ('' none)
--   Returns  {1, new version}, or {0, the stored version} when it is not the
--            one the caller read (nothing written)
-- ARGV[1]  'bump': shard i adopts a layout version
--   ARGV[2]  the version (`layout` only grows: a lower one changes nothing)
--   ARGV[3]  i, the shard's index (kept as `shard`)
--   ARGV[4]  'open': new tasks may be placed here (a shard below K);
--            'close': none may (a shard a lowering drains or removed:
--            `closed` = 1, and enqueue answers LAYOUT; claims, acks and
--            retries in place go on). Applied only when the version is
--            adopted or already equal (an older bump changes nothing).
--   Returns  the shard's version after the call
-- ARGV[1]  'rate': the queue-wide rate limit of a sharded queue, kept on
--          shard 0 as `rate_total` ("n:period_ms") besides the shards'
--          shares (`rate_n` each), so that it survives a change of K cut
--          off halfway
--   ARGV[2]  'get', 'set' (ARGV[3] the value), 'init' (a queue being
--            sharded: when none is kept, this shard's own limit, read here
--            in the same step, becomes the total) or 'del'
--   Returns  the value before the call (false: none)
local cfg = KEYS[1]
if ARGV[1] == 'rate' then
  local was = redis.call('HGET', cfg, 'rate_total')
  if ARGV[2] == 'set' then
    redis.call('HSET', cfg, 'rate_total', ARGV[3])
  elseif ARGV[2] == 'init' and not was then
    local own = redis.call('HMGET', cfg, 'rate_n', 'rate_period_ms')
    if own[1] and own[2] then redis.call('HSET', cfg, 'rate_total', own[1] .. ':' .. own[2]) end
  elseif ARGV[2] == 'del' then
    redis.call('HDEL', cfg, 'rate_total')
  end
  return was
end
if ARGV[1] == 'commit' then
  local have = tonumber(redis.call('HGET', cfg, 'layout') or '0')
  if have ~= tonumber(ARGV[2]) then return {0, have} end
  redis.call('HSET', cfg, 'layout', ARGV[3], 'shards', ARGV[4])
  if ARGV[5] == '' then redis.call('HDEL', cfg, 'shard_n') else redis.call('HSET', cfg, 'shard_n', ARGV[5]) end
  if ARGV[6] == '' then redis.call('HDEL', cfg, 'draining') else redis.call('HSET', cfg, 'draining', ARGV[6]) end
  return {1, tonumber(ARGV[3])}
end
if ARGV[1] == 'bump' then
  local have = tonumber(redis.call('HGET', cfg, 'layout') or '0')
  local want = tonumber(ARGV[2])
  if want > have then
    redis.call('HSET', cfg, 'layout', ARGV[2], 'shard', ARGV[3])
    have = want
  end
  if want == have then
    if ARGV[4] == 'close' then
      redis.call('HSET', cfg, 'closed', '1')
    elseif ARGV[4] == 'open' then
      redis.call('HDEL', cfg, 'closed')
    end
  end
  return have
end
return redis.error_reply('ERR layout: unknown operation ' .. tostring(ARGV[1]))
