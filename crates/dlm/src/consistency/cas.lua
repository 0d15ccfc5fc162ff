-- cas: versioned compare-and-set (the optimistic lock of seed 003).
-- KEYS[1]  a hash holding the record: fields 'v' (version) and 'data'
-- ARGV[1]  the version the writer read (0: the record must not exist yet)
-- ARGV[2]  the new data
-- Returns  {1, new_version}       written; the version is now ARGV[1] + 1
--          {0, current_version}   conflict: somebody wrote since (0: no record)
local current = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if current ~= tonumber(ARGV[1]) then
  return {0, current}
end
redis.call('HSET', KEYS[1], 'v', current + 1, 'data', ARGV[2])
return {1, current + 1}
