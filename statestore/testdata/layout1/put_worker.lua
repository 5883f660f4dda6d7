-- put_worker.lua — register or refresh (heartbeat) a worker; adds or drops data-parallel ranks.
--
-- KEYS: the pool's key list (see lib.lua).
-- ARGV: [1] now, ms  [2] worker id  [3] url  [4] dp size (>= 1)  [5] total_kv_blocks
--       [6] max_num_batched_tokens  [7] kv_events (-1 pool default, 0, 1)  [8] max workers per pool.
-- Reply: {'ok'} | {'unknown_pool'} | {'too_many'}.
-- Complexity: O(W) (the candidate roster is rebuilt when the spec changed).
local now, wid, url = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local dp, tkv, mnbt, kve = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if redis.call('EXISTS', K_CFG) == 0 then return {'unknown_pool'} end
local wp = redis.call('HGET', K_WK, wid)
local w
if not wp then
  if redis.call('HLEN', K_WK) >= tonumber(ARGV[8]) then return {'too_many'} end
  w = {url, 0, tkv, mnbt, kve, {}, {}}
  redis.call('ZADD', K_WZ, 0, wid)
else
  w = cmsgpack.unpack(wp)
end
redis.call('HSET', K_SEEN, wid, now)
local changed = not wp or w[1] ~= url or w[2] ~= dp or w[3] ~= tkv or w[4] ~= mnbt or w[5] ~= kve
if not changed then return {'ok'} end
w[1], w[3], w[4], w[5] = url, tkv, mnbt, kve
while w[2] < dp do
  local rid = redis.call('HINCRBY', K_SC, 'rid', 1)
  w[2] = w[2] + 1
  w[6][w[2]] = rid
  w[7][w[2]] = new_slot()
end
while w[2] > dp do
  local rid, slot = w[6][w[2]], w[7][w[2]]
  redis.call('RPUSH', K_DEAD, slot)
  redis.call('HDEL', K_FENCE, 'e' .. rid, 'i' .. rid, 'g' .. rid)
  w[6][w[2]], w[7][w[2]] = nil, nil
  w[2] = w[2] - 1
end
redis.call('HSET', K_WK, wid, cmsgpack.pack(w))
roster_rebuild({[wid] = w})
return {'ok'}
