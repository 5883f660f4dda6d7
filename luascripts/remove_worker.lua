-- remove_worker.lua — deregister a worker: it stops counting at once (its slots leave the roster); its
-- index entries are reclaimed incrementally by later calls.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] now, ms (unused since the fourteenth session; kept: callers of every build send it)  [2] worker id.
-- Reply: {'ok'} | {'unknown_pool'} | {'layout_mismatch', found layout} | {'unknown_worker'}.
-- Complexity: O(CH + dp) + O(W/CH) directory bytes (roster_replace) + while a rescoring of the load order
-- is under way, one step of it (LZ.tick: RESCORE_TICK members). The dead slots are reclaimed by later calls
-- (route, apply_events: RECLAIM_CALLS Redis calls each).
bind(KEYS)
local wid = ARGV[2]   -- (ARGV[1], now, no longer read: the call reclaims nothing)
local refused = pool_check()
if refused then return refused end
local wp = redis.call('HGET', K_WK, wid)
if not wp then return {'unknown_worker'} end
local w = cmsgpack.unpack(wp)
for r = 1, w[W.DP] do
  local rid = w[W.RIDS][r]
  redis.call('RPUSH', K_DEAD, w[W.SLOTS][r])
  redis.call('HDEL', K_FENCE, 'e' .. rid, 'i' .. rid, 'g' .. rid)
  redis.call('HDEL', K_TC, '' .. rid)   -- the rank's TTFT calibration goes with it
end
redis.call('HDEL', K_WK, wid)
redis.call('HDEL', K_SEEN, wid)
redis.call('ZREM', K_SZ, wid)
redis.call('HDEL', K_HC, wid)   -- health belongs to the registration: a worker registered again starts healthy
redis.call('HDEL', K_HU, wid)
redis.call('ZREM', K_WZ, wid)
roster_replace(wid, nil)
-- No reclamation here: the roster rewrite is this call's work (~2 M instructions at 4,096 workers), and the
-- next routes and ingest calls reclaim the dead slots within their own budgets (its share here made a
-- removal at 4,096 workers 3-4 M instructions, over 1 ms; docs/PERFORMANCE.md "Fourteenth session").
LZ.tick()
return {'ok'}
