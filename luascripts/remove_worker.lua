-- remove_worker.lua — deregister a worker: it stops counting at once (its slots leave the roster); its
-- index entries are reclaimed incrementally by later calls.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] now, ms  [2] worker id.
-- Reply: {'ok'} | {'unknown_pool'} | {'layout_mismatch', found layout} | {'unknown_worker'}.
-- Complexity: O(CH + dp) + O(W/CH) directory bytes (roster_replace) + bounded reclamation (RECLAIM_ENTRIES
-- engine-map entries, SOFT_SWEEP soft entries: the same bound as apply_events; the dead slots are reclaimed
-- by later calls, as route and apply_events do) + while a rescoring of the load order is under way, one
-- step of it (LZ.tick: RESCORE_TICK members).
bind(KEYS)
local now, wid = tonumber(ARGV[1]), ARGV[2]
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
reclaim(now, SOFT_SWEEP)   -- as apply_events: 64 whole buckets here took 3-8 ms at 1 M entries
LZ.tick()
return {'ok'}
