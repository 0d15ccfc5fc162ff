-- task: everything known about one task, for `dlm queue task` and the
-- dashboard's task page (read only: nothing moves).
-- KEYS: the queue's thirty-one keys, in the order enqueue.lua's header lists
-- them (all sharing the {queue} hash tag). This script reads 1 waiting,
-- 2 payload, 3 inflight, 4 lease, 5 attempts, 6 dead, 7 errors, 9 stats,
-- 12 prio, 13 group, 14 ready, 17 parkedid, 19 completed, 22 timeout,
-- 23 results, 24 done, 25 progress, 26 blocked, 27 pending, 28 deps,
-- 29 children, 30 depfail.
-- KEYS[32..] the payload buckets (the one of ARGV[1]) once the queue uses them; without
--          them such a queue gets the status BUCKETS (payload.lua; keyset.rs)
-- ARGV[1]  the task id
-- Returns  {state ('in_flight', 'waiting', 'delayed', 'blocked', 'dead',
--           'completed' or 'unknown'), score (due time, lease deadline, time it
--           died or when its completion is forgotten; -1: none), attempts,
--           lease fencing token (nil: none), last error (nil), progress
--           ("pct NUL message", nil), dependencies (NUL-terminated ids, nil),
--           dependents (NUL-terminated ids, nil), dependencies not done yet,
--           result length (-1: none), payload length (-1: none), priority,
--           group (nil), 'ignore' when a dependency's death is ignored (nil),
--           run-time limit in ms (0: none), now (ms), and for a completed
--           task the summary kept in front of its result (issue 31: see
--           results.lua's summary_of; nil: none)}
-- Issue 31: the payload bucket it may touch is declared (payload.lua).
if needs_buckets({ARGV[1]}) then return redis.status_reply('BUCKETS') end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local id = ARGV[1]
local state, score = 'unknown', -1
local function at(key)
  local s = redis.call('ZSCORE', key, id)
  if s then return tonumber(s) end
  return nil
end
local prio = tonumber(redis.call('HGET', KEYS[12], id) or '0')
local s = at(KEYS[3])
if s then
  state, score = 'in_flight', s
else
  s = at(KEYS[1])
  if s then
    score = s
    if s <= now then state = 'waiting' else state = 'delayed' end
  else
    s = at(KEYS[14])
    if s then
      state, score = 'waiting', s + prio * 4398046511104
    elseif redis.call('HEXISTS', KEYS[17], id) == 1 then
      state = 'waiting'
    else
      s = at(KEYS[26])
      if s then
        state, score = 'blocked', s
      else
        s = at(KEYS[6])
        if s then
          state, score = 'dead', s
        else
          s = at(KEYS[24])
          if s and s > now then
            state, score = 'completed', s
          elseif at(KEYS[19]) then
            state, score = 'completed', at(KEYS[19])
          end
        end
      end
    end
  end
end
local payload_len = -1
if state ~= 'unknown' and state ~= 'completed' then
  local p = payloads_of({id}, small_count() > 0)[1]
  if p then payload_len = #p end
end
local result_len, summary = -1, false
-- Issue 31: what a finished task was is kept in front of its result.
local head, bytes = split_result(redis.call('HGET', KEYS[23], id))
if bytes and bytes ~= '' then result_len = #bytes end
if state == 'completed' then summary = head or false end
return {
  state, score,
  tonumber(redis.call('HGET', KEYS[5], id) or '0'),
  redis.call('HGET', KEYS[4], id),
  redis.call('HGET', KEYS[7], id),
  redis.call('HGET', KEYS[25], id),
  redis.call('HGET', KEYS[28], id),
  redis.call('HGET', KEYS[29], id),
  tonumber(redis.call('HGET', KEYS[27], id) or '0'),
  result_len,
  payload_len,
  prio,
  redis.call('HGET', KEYS[13], id),
  redis.call('HGET', KEYS[30], id),
  tonumber(redis.call('HGET', KEYS[22], id) or '0'),
  now,
  summary,
}
