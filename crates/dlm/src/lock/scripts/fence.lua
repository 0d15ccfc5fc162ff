-- fence (a prelude, not a script of its own: acquire_many.lua, acquire_all.lua, settle_many.lua
-- and release_to.lua start with it): the next fencing token from a lock's counter. A fence is
-- always above 2^48 (dlm::keys::FENCE_FLOOR): an INCR that lands at or below it (a new counter,
-- or one an older dlm kept per hash slot) raises the counter past it first. The floor is a
-- string: Lua would print the number 2^48 in an exponent form that INCRBY refuses.
-- A counter that does not hold an integer (written by hand, or another program's key) raises an
-- error that names it. acquire_many.lua and settle_many.lua catch it per lock (code -4) and
-- delete the key they granted; in acquire_all.lua and release_to.lua it fails the script, and
-- Redis rolls back nothing a script did before the error: the client counts such an attempt as
-- unsure and releases its token (lock/mod.rs).
-- KEYS     none of its own: fence(counter) takes the counter key its script was given in KEYS
-- ARGV     none
-- Returns  fence(counter) returns the new fence (above 2^48); the prelude itself returns nothing
local function fence(counter)
  local f = redis.pcall('INCR', counter)
  if type(f) == 'table' and f.err then
    return error({err = 'ERR dlm: the fencing counter ' .. counter ..
      ' does not hold an integer (' .. f.err .. '); a lock acquired now would get no fence'})
  end
  if f <= 281474976710656 then
    f = redis.call('INCRBY', counter, '281474976710656')
  end
  return f
end
