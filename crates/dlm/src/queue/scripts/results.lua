-- results: helpers prepended (by ops.rs) to the scripts that finish tasks
-- (ack) or read what they left (result). They use KEYS 9 (stats), 11
-- (config), 23 (results: id -> bytes), 24 (done: id -> ms when it is
-- forgotten) of the headers of those scripts, and return nothing to the
-- caller by themselves.
-- Bounds: a result is at most 1 MiB (checked by the caller), at most
-- MAX_REMEMBERED ids are remembered, the results kept add up to at most
-- the setting keep_results_bytes (default 64 MiB; issue 31) - beyond
-- either the soonest forgotten (the oldest) go first, with their results,
-- counted in stats `results_evicted` - and each call forgets at most
-- EXPIRE_PER_CALL expired ids (lazy expiry); both keys expire as a whole
-- at the latest forget time, so an idle queue's results go away by
-- themselves. Stats `result_bytes` is the bytes of the results kept; it
-- counts only while `results` exists (a result stored into a `results`
-- key that expired as a whole starts again from 0).
-- The field `extras` of `config` ('1') marks a queue that has used issue
-- 24's keys (a time limit, a result, a completion, progress): claim and
-- ack read it with the settings they read anyway, so a queue that never
-- did pays no command for them.
-- The helpers are made on first use (results_helpers()): a call that needs
-- none of them pays for one closure, not for ten.
local results_made, results_helpers, remember_done, trim_done
-- Issue 31: a finished task's summary, kept in front of its result in
-- `results` (23), so it is forgotten (and bounded) with it: SUMMARY_MAGIC,
-- the summary's length, ':', then its fields, each as its length, ':' and
-- its bytes: attempts, when its last run started (ms, Redis clock; '':
-- unknown), when it finished (ms), the worker that ran it (''), its last
-- progress ("pct NUL message", ''), its dependencies and its dependents
-- (ids each ending in NUL, ''; at most SUMMARY_LIST_MAX bytes of each:
-- the first ids). The result is what follows ('': none). A value without
-- the magic is a bare result (written before summaries).
local SUMMARY_MAGIC = '\0dlm-summary-1\0'
local SUMMARY_FIELDS, SUMMARY_LIST_MAX = 7, 65536
local summary_of, split_result
-- Made only on a call with all keys (a plain queue's narrow hot calls
-- never need them, and pay for no closure).
if #KEYS >= 31 then
  summary_of = function(fields)
    local parts = {}
    for i = 1, SUMMARY_FIELDS do -- not ipairs: a field may be nil (none)
      local f = tostring(fields[i] or '')
      if i >= 6 and #f > SUMMARY_LIST_MAX then
        -- A long list of ids: its first ids, up to the last whole one.
        f = string.match(string.sub(f, 1, SUMMARY_LIST_MAX), '^(.*%z)') or ''
      end
      parts[i] = #f .. ':' .. f
    end
    local body = table.concat(parts)
    return SUMMARY_MAGIC .. #body .. ':' .. body
  end
  -- A stored value (nil/false: none) as its summary (nil: none) and result.
  split_result = function(v)
    if not v or string.sub(v, 1, #SUMMARY_MAGIC) ~= SUMMARY_MAGIC then return nil, v end
    local colon = string.find(v, ':', #SUMMARY_MAGIC + 1, true)
    local n = colon and tonumber(string.sub(v, #SUMMARY_MAGIC + 1, colon - 1))
    if not n then return nil, v end
    return string.sub(v, colon + 1, colon + n), string.sub(v, colon + n + 1)
  end
end
-- Not made at all on a narrow call (19 keys: a queue that never used them).
if #KEYS >= 31 then
  results_helpers = function()
    if results_made then return results_made end
    local R = {}
    local DEFAULT_RESULT_TTL_MS = 3600000 -- keep_results not set: 1 hour
    local DEFAULT_RESULT_BYTES = 67108864 -- keep_results_bytes not set: 64 MiB
    local MAX_REMEMBERED = 100000
    local EXPIRE_PER_CALL = 100
    local cfg, marked
    -- The bytes of the results kept (stats `result_bytes`), read once per
    -- call and written back by R.trim when `dirty`; evicted: results evicted
    -- by this call.
    local total, dirty, evicted = nil, false, 0
    function R.now()
      local t = redis.call('TIME')
      return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    -- The queue's keep_results setting in ms (0: results are not kept) and
    -- the time until which a `wait_result` may wait (0: nobody waits), read
    -- once, with keep_results_bytes (cfg[3]).
    function R.config()
      if not cfg then
        local c = redis.call('HMGET', KEYS[11], 'keep_results_ms', 'result_waiters', 'extras', 'keep_results_bytes')
        cfg = {tonumber(c[1] or DEFAULT_RESULT_TTL_MS), tonumber(c[2] or '0'), tonumber(c[4] or DEFAULT_RESULT_BYTES)}
        marked = c[3] == '1'
      end
      return cfg[1], cfg[2]
    end
    -- (A `results` key that is gone, e.g. expired as a whole, holds 0
    -- bytes, whatever stats says: the next result stored writes it anew.)
    local present
    local function bytes_kept()
      if not total then
        present = redis.call('EXISTS', KEYS[23]) == 1
        total = 0
        if present then total = tonumber(redis.call('HGET', KEYS[9], 'result_bytes') or '0') end
      end
      return total
    end
    -- Delete the results of `ids` (a list), counting their bytes off;
    -- returns how many had one.
    function R.drop(ids)
      if #ids == 0 then return 0 end
      bytes_kept()
      if not present then return 0 end
      local had = {}
      for _, id in ipairs(ids) do
        local len = redis.call('HSTRLEN', KEYS[23], id)
        if len > 0 then
          had[#had + 1] = id
          total = total - len
        end
      end
      for i = 1, #had, 2000 do
        redis.call('HDEL', KEYS[23], unpack(had, i, math.min(i + 1999, #had)))
      end
      if #had > 0 then dirty = true end
      return #had
    end
    -- Set `extras` (once per call).
    function R.mark()
      R.config()
      if not marked then
        redis.call('HSET', KEYS[11], 'extras', '1')
        marked = true
      end
    end
    function R.remember_done(id, now)
      local keep = R.config()
      if keep <= 0 then keep = DEFAULT_RESULT_TTL_MS end
      redis.call('ZADD', KEYS[24], now + keep, id)
      R.mark()
    end
    -- Store `bytes` as id's result, unless results are off (keep_results 0);
    -- whether it was stored.
    function R.remember_result(id, now, bytes)
      local keep = R.config()
      if keep <= 0 then return false end
      total = bytes_kept() - redis.call('HSTRLEN', KEYS[23], id) + #bytes
      dirty, present = true, true
      redis.call('HSET', KEYS[23], id, bytes)
      redis.call('ZADD', KEYS[24], now + keep, id)
      R.mark()
      return true
    end
    -- Forget up to EXPIRE_PER_CALL ids whose time has come.
    function R.expire(now)
      local old = redis.call('ZRANGEBYSCORE', KEYS[24], '-inf', now, 'LIMIT', 0, EXPIRE_PER_CALL)
      if #old > 0 then
        redis.call('ZREM', KEYS[24], unpack(old))
        R.drop(old)
      end
    end
    -- After remembering: expire, evict beyond MAX_REMEMBERED and beyond
    -- keep_results_bytes (soonest forgotten first, i.e. the oldest), write
    -- the byte count back and let both keys expire at the latest forget time.
    function R.trim(now)
      R.expire(now)
      local over = redis.call('ZCARD', KEYS[24]) - MAX_REMEMBERED
      if over > 0 then
        local gone = redis.call('ZRANGE', KEYS[24], 0, over - 1)
        redis.call('ZREMRANGEBYRANK', KEYS[24], 0, over - 1)
        evicted = evicted + R.drop(gone)
      end
      R.config()
      -- Issue 31: the bytes bound. Each round forgets a prefix of `done`, so
      -- the loop ends (at the latest when `done` is empty).
      while total and total > cfg[3] do
        local page = redis.call('ZRANGE', KEYS[24], 0, 99)
        if #page == 0 then break end
        local take, left = {}, total
        for _, id in ipairs(page) do
          if left <= cfg[3] then break end
          take[#take + 1] = id
          left = left - redis.call('HSTRLEN', KEYS[23], id)
        end
        redis.call('ZREMRANGEBYRANK', KEYS[24], 0, #take - 1)
        evicted = evicted + R.drop(take) -- counts their bytes off `total`
      end
      if dirty then redis.call('HSET', KEYS[9], 'result_bytes', math.max(0, total or 0)) end
      if evicted > 0 then redis.call('HINCRBY', KEYS[9], 'results_evicted', evicted) end
      dirty, evicted = false, 0
      local last = redis.call('ZRANGE', KEYS[24], -1, -1, 'WITHSCORES')
      if last[2] then
        local at = tonumber(last[2]) + 1
        redis.call('PEXPIREAT', KEYS[24], at)
        redis.call('PEXPIREAT', KEYS[23], at)
      end
    end
    -- Wake the callers of `wait_result` waiting for these ids (a list), if
    -- any may wait: a message per id on the channel named like the results key.
    function R.publish(ids, now)
      local _, waiters = R.config()
      if waiters < now then return end
      for _, id in ipairs(ids) do redis.call('PUBLISH', KEYS[23], id) end
    end
    results_made = R
    return R
  end
  -- For the dependency code: remember that `id` finished (no result bytes),
  -- until now + the queue's result TTL (1 hour when results are off or not
  -- set). Call trim_done(now) once after the last call.
  remember_done = function(id, now)
    results_helpers().remember_done(id, now)
  end
  trim_done = function(now)
    results_helpers().trim(now)
  end
end
