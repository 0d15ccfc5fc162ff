-- events_read: a page of the queue's event log (read only).
-- KEYS: the queue's thirty-one keys, in the order enqueue.lua's header lists
-- them (all sharing the {queue} hash tag); this script reads 31 events.
-- ARGV[1]  the entry to start after: '-' from the oldest kept, '$' only the
--          position of the newest (no entries), or an entry id (exclusive)
-- ARGV[2]  how many entries at most
-- Returns  {the last entry id seen (ARGV[1] when none; '0-0' for an empty log),
--           then the entries as XRANGE gives them: {id, {field, value, ...}}}
local from, count = ARGV[1], tonumber(ARGV[2])
if from == '$' then
  local last = redis.call('XREVRANGE', KEYS[31], '+', '-', 'COUNT', 1)
  if last[1] then return {last[1][1]} end
  return {'0-0'}
end
local start = '-'
if from ~= '-' then start = '(' .. from end
local page = redis.call('XRANGE', KEYS[31], start, '+', 'COUNT', count)
local out = {from}
if page[#page] then out[1] = page[#page][1] end
for _, e in ipairs(page) do out[#out + 1] = e end
return out
