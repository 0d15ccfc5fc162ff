-- fence (a prelude, not a script of its own: acquire_many.lua, acquire_all.lua and release_to.lua
-- start with it): the next fencing token from a lock's counter. A fence is always above 2^48
-- (dlm::keys::FENCE_FLOOR): an INCR that lands at or below it (a new counter, or one an older
-- dlm kept per hash slot) raises the counter past it first. The floor is a string: Lua would
-- print the number 2^48 in an exponent form that INCRBY refuses.
-- KEYS     none of its own: fence(counter) takes the counter key its script was given in KEYS
-- ARGV     none
-- Returns  fence(counter) returns the new fence (above 2^48); the prelude itself returns nothing
local function fence(counter)
  local f = redis.call('INCR', counter)
  if f <= 281474976710656 then
    f = redis.call('INCRBY', counter, '281474976710656')
  end
  return f
end
