-- put_worker.lua — register or refresh (heartbeat) a worker; adds or drops data-parallel ranks.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] now, ms  [2] worker id  [3] url  [4] dp size (>= 1)  [5] total_kv_blocks
--       [6] max_num_batched_tokens  [7] kv_events (-1 pool default, 0, 1)  [8] max workers per pool
--       [9] S, the full-scan bound in ranks (statestore's fullScanMaxRanks): a registration leaving the pool
--       with more ranks starts keeping its load orders (lib.lua "Load orders only where a route may walk").
-- Reply: {'ok'} | {'unknown_pool'} | {'layout_mismatch', found layout} | {'too_many'}.
-- Complexity: a new worker or a changed spec: O(CH + dp) + O(W/CH) directory bytes (roster_replace
-- rewrites the one or two roster chunks holding the worker's ranks; CH = 64), and once per pool, when it
-- passes S ranks, O(S + dp) to build the load orders (LZ.build); an unchanged heartbeat: O(1).
-- Either way, while a rescoring of the load order is under way, one step of it (LZ.tick: RESCORE_TICK
-- members): heartbeats finish a rescoring whose PutPool caller died.
bind(KEYS)
local now, wid, url = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local dp, tkv, mnbt, kve = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local refused = pool_check()
if refused then return refused end
local wp = redis.call('HGET', K_WK, wid)
local w
if not wp then
  if redis.call('HLEN', K_WK) >= tonumber(ARGV[8]) then return {'too_many'} end
  w = {url, 0, tkv, mnbt, kve, {}, {}}   -- W_* order (dp 0: ranks are added below)
  redis.call('ZADD', K_WZ, 0, wid)
else
  w = cmsgpack.unpack(wp)
end
seen_set(wid, now)
local changed = not wp or w[W.URL] ~= url or w[W.DP] ~= dp or w[W.TKV] ~= tkv or w[W.MNBT] ~= mnbt or w[W.KVE] ~= kve
if not changed then LZ.tick(); return {'ok'} end
w[W.URL], w[W.TKV], w[W.MNBT], w[W.KVE] = url, tkv, mnbt, kve
while w[W.DP] < dp do
  local rid = redis.call('HINCRBY', K_SC, 'rid', 1)
  w[W.DP] = w[W.DP] + 1
  w[W.RIDS][w[W.DP]] = rid
  w[W.SLOTS][w[W.DP]] = new_slot(wid)
end
while w[W.DP] > dp do
  local rid, slot = w[W.RIDS][w[W.DP]], w[W.SLOTS][w[W.DP]]
  redis.call('RPUSH', K_DEAD, slot)
  redis.call('HDEL', K_FENCE, 'e' .. rid, 'i' .. rid, 'g' .. rid)
  redis.call('HDEL', K_TC, '' .. rid)   -- the rank's TTFT calibration goes with it
  w[W.RIDS][w[W.DP]], w[W.SLOTS][w[W.DP]] = nil, nil
  w[W.DP] = w[W.DP] - 1
end
redis.call('HSET', K_WK, wid, cmsgpack.pack(w))
roster_replace(wid, w)
if not LZ_KEPT and ros().n > (tonumber(ARGV[9]) or 0) then LZ.build() end
LZ.tick()
return {'ok'}
