-- events: helpers prepended (by ops.rs) to the scripts that change a task's
-- state: enqueue, claim, ack, nack (and deps.lua uses them). They write the
-- queue's event log, the stream KEYS[31], only when the setting
-- events_maxlen (config, KEYS[11]) is above 0: XADD ... MAXLEN ~ that many.
-- Events of one kind (and detail) in one script call share one entry:
--   e    the kind: added, claimed, progress, completed, failed, dead, released
--   ids  the task ids, each ending in a NUL byte (at most 1000 an entry)
--   d    the detail, when the kind has one: the error (failed, dead), or
--        "pct NUL message" (progress)
-- The entry's id (ms-seq, server clock) is the events' time. Readers
-- (Queue::events, dlm queue events) expand an entry into one event per id.
-- A narrow call (the first 19 keys only: see keyset.rs; the scripts refuse
-- one when the queue's log is on) writes no events: the four helpers are
-- one shared no-op there, so such a call makes one closure, not four.
local EVENTS_MAX, EVENT_BUF, EVENT_ORDER = nil, nil, nil
local events_preset, event, event_many, flush_events
if #KEYS < 31 then
  EVENTS_MAX = 0
  events_preset = function() end
  event, event_many, flush_events = events_preset, events_preset, events_preset
else
  -- The cap as read with other settings (saves the script its own read).
  function events_preset(v)
    EVENTS_MAX = tonumber(v or '0') or 0
  end
  -- Note an event of task id (written by flush_events).
  function event(kind, id, detail)
    if EVENTS_MAX == nil then
      -- Not read with the settings: read it now (once per script call).
      EVENTS_MAX = tonumber(redis.call('HGET', KEYS[11], 'events_maxlen') or '0') or 0
    end
    if EVENTS_MAX <= 0 then return end
    if not EVENT_BUF then EVENT_BUF, EVENT_ORDER = {}, {} end
    local k = kind .. '\0' .. (detail or '')
    local b = EVENT_BUF[k]
    if not b then
      b = {kind = kind, detail = detail, ids = {}}
      EVENT_BUF[k] = b
      EVENT_ORDER[#EVENT_ORDER + 1] = k
    end
    b.ids[#b.ids + 1] = id .. '\0'
  end
  function event_many(kind, ids, detail)
    if EVENTS_MAX ~= nil and EVENTS_MAX <= 0 then return end
    for _, id in ipairs(ids) do event(kind, id, detail) end
  end
  -- Write the noted events: one entry per kind and detail (per 1000 ids).
  function flush_events()
    if not EVENT_BUF then return end
    for _, k in ipairs(EVENT_ORDER) do
      local b = EVENT_BUF[k]
      for i = 1, #b.ids, 1000 do
        local ids = table.concat(b.ids, '', i, math.min(i + 999, #b.ids))
        if b.detail then
          redis.call('XADD', KEYS[31], 'MAXLEN', '~', EVENTS_MAX, '*', 'e', b.kind, 'ids', ids, 'd', b.detail)
        else
          redis.call('XADD', KEYS[31], 'MAXLEN', '~', EVENTS_MAX, '*', 'e', b.kind, 'ids', ids)
        end
      end
    end
    EVENT_BUF, EVENT_ORDER = nil, nil
  end
end
