-- layout_gate: a helper prepended (by ops.rs) to enqueue.lua and claim.lua,
-- the two calls that decide where a task goes or where it is taken from on a
-- sharded queue (docs/sharded-queue.md, section 1). It uses KEYS[11]
-- (`config`) and returns nothing to the caller by itself.
-- layout_stale(have, given): `have` is this shard's `layout` field (false:
-- absent, a queue never sharded), `given` the call's layout version (false:
-- the call was made as for a queue that is not sharded). True when the call
-- must write nothing and answer the status LAYOUT (the caller's layout is
-- stale: it reads the layout again and places the call anew). A call that
-- carries a newer version than the shard's makes the shard adopt it, so once
-- a fresh call has reached a shard no stale one is decided there.
local function layout_stale(have, given)
  if not given then return have ~= false end
  local h, g = tonumber(have or '0'), tonumber(given)
  if h > g then return true end
  if h < g then redis.call('HSET', KEYS[11], 'layout', given) end
  return false
end
