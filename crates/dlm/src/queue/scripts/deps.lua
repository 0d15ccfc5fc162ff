-- deps: helpers prepended (by ops.rs) to the scripts that finish a task or
-- write one with dependencies: enqueue, claim (a lease that expired on its
-- last attempt), ack, nack, pop, remove_if_score. They come after groups.lua
-- (wake, in_ready), events.lua (released and dead events) and results.lua
-- (remember_done, trim_done), and
-- use the KEYS listed in those scripts' headers; they return nothing to the
-- caller by themselves.
-- A task with dependencies (NewTask::after) waits in `blocked` (26), scored
-- by the due time it asked for, and `pending` (27) counts its dependencies
-- that are not done yet. Every edge is kept twice: `deps` (28) lists a
-- task's dependencies and `children` (29) a task's dependents, each as ids
-- that end in a NUL byte ("a\0b\0"), so appending costs no decoding (ids
-- that take part in dependencies have no NUL byte). `depfail` (30) marks
-- the tasks that ignore a dependency's death. The last finish of a
-- dependency releases the task into `waiting` in the same script.
-- Edges are a set (issue 31): children[p] lists c at most once, only while c
-- is blocked and p is one of c's dependencies not done yet; a dependent that
-- dies is taken out of every parent's list (drop_edges), and a dependency's
-- end counts for c only when it is among c's current dependencies
-- (one_dep_done), so an edge left by an earlier run of c never counts.
-- A completed task that took part in dependencies is remembered in `done`
-- (24) until its result's TTL ends (results.lua's remember_done), so a task
-- enqueued later may depend on it.
-- The helpers are made on first use (DAG()): a script call of a queue
-- without dependencies pays for one closure, not for eleven.
local dag_made, DAG
-- Not made at all on a narrow call (19 keys: a queue that never used them).
if #KEYS >= 31 then
  DAG = function()
    if dag_made then return dag_made end
    -- Is any task of the queue part of a dependency graph?
    local function dag_in_use()
      return redis.call('EXISTS', KEYS[26], KEYS[28], KEYS[29]) > 0
    end
    -- The ids of a NUL-terminated list.
    local function split_ids(s)
      local out = {}
      if not s then return out end
      for id in string.gmatch(s, '([^%z]*)%z') do out[#out + 1] = id end
      return out
    end
    -- Did id complete, and is that still remembered (results' TTL, or the
    -- completed history of keep_completed)?
    local function known_done(id, now)
      local until_ms = redis.call('ZSCORE', KEYS[24], id)
      if until_ms and tonumber(until_ms) > now then return true end
      return redis.call('ZSCORE', KEYS[19], id) ~= false
    end
    -- Is id waiting, delayed, parked, in flight or blocked (alive, not finished)?
    local function alive(id)
      return redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[3], id)
        or redis.call('ZSCORE', KEYS[26], id) or in_ready(id)
    end
    -- Is p among c's current dependencies (deps, 28)?
    local function is_dep_of(c, p)
      local ds = redis.call('HGET', KEYS[28], c)
      if not ds then return false end
      return string.sub(ds, 1, #p + 1) == p .. '\0' or string.find(ds, '\0' .. p .. '\0', 1, true) ~= nil
    end
    -- Add the dependents `kids` (a list) to p's children, each once.
    local function add_edges(p, kids)
      local cur = redis.call('HGET', KEYS[29], p) or ''
      local add, seen = {}, {}
      for _, k in ipairs(split_ids(cur)) do seen[k] = true end
      for _, k in ipairs(kids) do
        -- (The marker comment names this line for the `seeded-defects` feature's
        -- EarlyDependent variant, a test-only build: src/seeded.rs.)
        if not seen[k] then -- [seeded EarlyDependent: edges are a set]
          seen[k] = true
          add[#add + 1] = k .. '\0'
        end
      end
      if #add > 0 then redis.call('HSET', KEYS[29], p, cur .. table.concat(add)) end
    end
    -- Take c out of the children of each of its dependencies (c leaves the
    -- graph without completing: it died). Before deps[c] is deleted.
    local function drop_edges(c)
      for _, p in ipairs(split_ids(redis.call('HGET', KEYS[28], c))) do
        local kids = redis.call('HGET', KEYS[29], p)
        if kids then
          local keep = {}
          for _, k in ipairs(split_ids(kids)) do
            if k ~= c then keep[#keep + 1] = k .. '\0' end
          end
          if #keep == 0 then
            redis.call('HDEL', KEYS[29], p)
          else
            redis.call('HSET', KEYS[29], p, table.concat(keep))
          end
        end
      end
    end
    -- A blocked task's last dependency is done: it becomes due (at the time it
    -- asked for, or now if that has passed).
    local function release_blocked(c, now)
      local due = redis.call('ZSCORE', KEYS[26], c)
      if not due then return false end
      redis.call('ZREM', KEYS[26], c)
      redis.call('HDEL', KEYS[27], c)
      redis.call('ZADD', KEYS[1], math.max(tonumber(due), now), c)
      event('released', c)
      return true
    end
    -- Dependency p of the blocked task c is done (or died, and c ignores
    -- that); returns whether c was released. Counts only while p is among
    -- c's current dependencies (an edge left by an earlier run of c does not).
    local function one_dep_done(c, p, now)
      if not redis.call('ZSCORE', KEYS[26], c) then return false end
      if not is_dep_of(c, p) then return false end
      if redis.call('HINCRBY', KEYS[27], c, -1) <= 0 then
        return release_blocked(c, now)
      end
      return false
    end
    -- Parent p completed: its dependents each have one dependency fewer.
    -- Returns how many were released.
    local function dependents_go_on(p, now)
      local kids = redis.call('HGET', KEYS[29], p)
      if not kids then return 0 end
      redis.call('HDEL', KEYS[29], p)
      local released = 0
      for _, c in ipairs(split_ids(kids)) do
        if one_dep_done(c, p, now) then released = released + 1 end
      end
      return released
    end
    -- The blocked task c dies (`why`): out of its dependencies' children
    -- too (drop_edges), into the dead set. Its dependents are the caller's.
    local function kill_blocked(c, why, now)
      -- (Marked for the EarlyDependent variant too: src/seeded.rs.)
      drop_edges(c) -- [seeded EarlyDependent: a dead dependent leaves]
      redis.call('ZREM', KEYS[26], c)
      redis.call('HDEL', KEYS[27], c)
      redis.call('ZADD', KEYS[6], now, c)
      redis.call('HSET', KEYS[7], c, why)
      redis.call('HDEL', KEYS[28], c)
      redis.call('HDEL', KEYS[30], c)
      event('dead', c, why)
      redis.call('HINCRBY', KEYS[9], 'failed', 1)
    end
    -- Task p died (dead set, or written dead at enqueue): each of its blocked
    -- dependents follows its policy, 'ignore' (the dependency counts as done)
    -- or 'fail' (it dies too, naming the dependency, and so on down the graph).
    -- Returns {released, died}.
    local function dependents_fail(p, now)
      local todo, i, released, died = {p}, 1, 0, 0
      while i <= #todo do
        local parent = todo[i]
        i = i + 1
        local kids = redis.call('HGET', KEYS[29], parent)
        if kids then
          redis.call('HDEL', KEYS[29], parent)
          for _, c in ipairs(split_ids(kids)) do
            if redis.call('ZSCORE', KEYS[26], c) and is_dep_of(c, parent) then
              if redis.call('HGET', KEYS[30], c) == 'ignore' then
                if one_dep_done(c, parent, now) then released = released + 1 end
              else
                kill_blocked(c, "dependency '" .. parent .. "' died", now)
                died = died + 1
                todo[#todo + 1] = c
              end
            end
          end
        end
      end
      return {released, died}
    end
    -- Tasks `ids` completed (acked, not enqueued again meanwhile): release their
    -- dependents, remember them if they took part in dependencies, and drop their
    -- own edges. Returns how many tasks were released.
    local function dag_completed(ids, now)
      local released, remembered = 0, false
      for _, id in ipairs(ids) do
        local had_deps = redis.call('HDEL', KEYS[28], id) == 1
        local has_kids = redis.call('HEXISTS', KEYS[29], id) == 1
        if had_deps or has_kids then
          remember_done(id, now)
          remembered = true
        end
        if has_kids then released = released + dependents_go_on(id, now) end
        redis.call('HDEL', KEYS[30], id)
      end
      if remembered then trim_done(now) end
      return released
    end
    -- Task id went to the dead set: drop its own edges (as a dependent too:
    -- written dead at enqueue, it may be listed by a dependency), then its
    -- dependents follow their policies. Returns {released, died}.
    local function dag_died(id, now)
      drop_edges(id)
      redis.call('HDEL', KEYS[28], id)
      redis.call('HDEL', KEYS[30], id)
      return dependents_fail(id, now)
    end
    -- Issue 31: the bound on dependencies not known yet (flag 'l'). A task
    -- blocked since more than `wait` ms past its due time on an id that is
    -- still not known (never enqueued: not alive, dead or remembered as
    -- done) dies, "dependency 'ID' was never enqueued", and leaves the graph
    -- (its dependents follow their policies); one that ignores a
    -- dependency's death counts that dependency as done instead, as it
    -- would a death. One call looks at up to 20
    -- such tasks, from the score `from` on (exclusive; a cursor: claims
    -- sweep now and then, see claim.lua). Returns {next cursor (nil: start
    -- again from the lowest), released, died}.
    local function expire_unknown(now, wait, from)
      local list = redis.call('ZRANGEBYSCORE', KEYS[26], from and ('(' .. from) or '-inf',
        now - wait, 'WITHSCORES', 'LIMIT', 0, 20)
      local released, died = 0, 0
      for i = 1, #list, 2 do
        local c = list[i]
        for _, d in ipairs(split_ids(redis.call('HGET', KEYS[28], c))) do
          local kids = redis.call('HGET', KEYS[29], d)
          local waits_for = kids and (string.sub(kids, 1, #c + 1) == c .. '\0'
            or string.find(kids, '\0' .. c .. '\0', 1, true) ~= nil)
          if waits_for and not alive(d) and not redis.call('ZSCORE', KEYS[6], d)
              and not known_done(d, now) then
            if redis.call('HGET', KEYS[30], c) == 'ignore' then
              local keep = {}
              for _, k in ipairs(split_ids(kids)) do
                if k ~= c then keep[#keep + 1] = k .. '\0' end
              end
              if #keep == 0 then
                redis.call('HDEL', KEYS[29], d)
              else
                redis.call('HSET', KEYS[29], d, table.concat(keep))
              end
              if one_dep_done(c, d, now) then
                released = released + 1
                break
              end
            else
              kill_blocked(c, "dependency '" .. d .. "' was never enqueued", now)
              died = died + 1
              local r = dependents_fail(c, now)
              released, died = released + r[1], died + r[2]
              break
            end
          end
        end
      end
      local next_from = nil
      if #list == 40 then next_from = list[#list] end
      return {next_from, released, died}
    end
    dag_made = {
      in_use = dag_in_use, split_ids = split_ids, known_done = known_done, alive = alive,
      completed = dag_completed, died = dag_died, add_edges = add_edges,
      expire_unknown = expire_unknown,
    }
    return dag_made
  end
end
