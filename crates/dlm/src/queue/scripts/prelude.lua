-- prelude: prepended to every queue script (one copy of what they share).
-- Payloads are spread over PAYLOAD_BUCKETS hashes named KEYS[2] .. ':' .. b, where b is a
-- hash of the task id (payload_key). Small hashes keep Redis's compact listpack encoding
-- (by default up to 128 fields of up to 64 bytes), which stores a small payload in about a
-- third of the memory a field of one big hash takes. The buckets share KEYS[2]'s {queue}
-- hash tag, so on Redis Cluster they live in the queue's slot like every other key.
local PAYLOAD_BUCKETS = 1024
local function payload_key(id)
  local h = 0
  for i = 1, #id do
    h = (h * 31 + string.byte(id, i)) % PAYLOAD_BUCKETS
  end
  return KEYS[2] .. ':' .. h
end
-- redis.call(cmd, key, list...) in chunks: Lua's unpack() takes a few thousand values at most.
local function chunked(cmd, key, list)
  for i = 1, #list, 2000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 1999, #list)))
  end
end
-- The same for a command with one reply per value (HMGET, ZMSCORE): the replies, concatenated.
local function fetch(cmd, key, list)
  local all = {}
  for i = 1, #list, 2000 do
    local part = redis.call(cmd, key, unpack(list, i, math.min(i + 1999, #list)))
    for k = 1, #part do all[#all + 1] = part[k] end
  end
  return all
end
