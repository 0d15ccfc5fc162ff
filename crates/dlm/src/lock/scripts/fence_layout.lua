-- fence_layout: where a client's lock fences come from, asked once per client before its first
-- lock operation on one Redis (lock/locks.rs, `Locks::prepare`). One Redis keeps one fencing
-- counter for every lock under a prefix (PREFIXfence); a Redis Cluster keeps one per hash slot
-- (PREFIXfence:{S}). dlm before 0.2 kept per-slot counters on one Redis too when the client was
-- built on a connection the application passed in, with fences above 2^48 like the shared one:
-- a lock that such a client and a newer one take turns on would see its fences go backwards.
-- So the first newer client raises the shared counter past every per-slot counter it finds, and
-- overwrites them with a text that makes an older client's INCR fail loudly instead of handing
-- out a lower fence. A marker key says it was done, so later clients only check it.
-- KEYS[1]   the shared fencing counter (PREFIXfence)
-- KEYS[2]   the layout marker (PREFIXfence:layout): exists once the older counters were raised past
-- KEYS[3]   a per-slot counter of a slot other than KEYS[1]'s: never read or written; it makes a
--           Redis Cluster refuse the call (CROSSSLOT), which is how a client built on a
--           connection the application passed in learns that it talks to a cluster
-- KEYS[4..] with ARGV[1] = 'migrate': per-slot counters of this prefix: those a complete SCAN
--           found, or, when the keyspace is too large to scan, every per-slot name (one per hash
--           slot, 16384, which the client knows), sent in chunks
-- ARGV[1]   'check' or 'migrate'
-- ARGV[2]   'migrate': the text written over each per-slot counter raised past
-- ARGV[3]   'migrate': '1' on the last (or only) call, which sets the marker; '0' before it
-- Returns   'check': 1 when the marker exists (nothing to do), else 0 (then 'migrate')
--           'migrate': how many per-slot counters were raised past (0 if the marker existed)
-- Only keys that hold a plain decimal integer count (what dlm's INCR leaves); they are compared
-- as decimal strings (by length, then by digits), never as Lua numbers, which are doubles.
if ARGV[1] == 'check' then
  return redis.call('EXISTS', KEYS[2])
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
-- `v` without leading zeros if it is a decimal integer, else nil.
local function digits(v)
  if type(v) ~= 'string' or not string.find(v, '^%d+$') then
    return nil
  end
  local d = string.gsub(v, '^0+', '')
  if d == '' then
    d = '0'
  end
  return d
end
local function above(a, b)
  return #a > #b or (#a == #b and a > b)
end
local top, moved = '0', 0
for i = 4, #KEYS do
  local d = digits(redis.pcall('GET', KEYS[i]))
  if d then
    if above(d, top) then
      top = d
    end
    redis.call('SET', KEYS[i], ARGV[2])
    moved = moved + 1
  end
end
local current = redis.pcall('GET', KEYS[1])
local now = current == false and '0' or digits(current)
-- A shared counter that is not an integer is left alone: the next grant names it in its error.
if now and above(top, now) then
  redis.call('SET', KEYS[1], top)
end
if ARGV[3] == '1' then
  redis.call('SET', KEYS[2], 'shared')
end
return moved
