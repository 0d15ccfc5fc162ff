-- leader: who leads now, without campaigning.
-- KEYS[1]  the leader's lease (value = owner token, PX = lease)
-- KEYS[2]  the leader hash (id, term, token)
-- KEYS[3]  the term counter
-- Returns  {1, id, term, pttl_ms}  a leader, its term and the time left on its lease
--          {0, latest_term}        nobody leads (latest_term: the last term granted, 0: never)
local cur = redis.call('GET', KEYS[1])
if not cur then
  return {0, tonumber(redis.call('GET', KEYS[3]) or '0')}
end
local info = redis.call('HMGET', KEYS[2], 'id', 'term', 'token')
local pttl = redis.call('PTTL', KEYS[1])
if info[3] ~= cur then
  -- A lease written by something else than campaign.lua: no id, no term.
  return {1, '', 0, pttl}
end
return {1, info[1], tonumber(info[2]), pttl}
