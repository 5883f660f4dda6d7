-- put_pool.lua — create or update a pool's knobs. block_size cannot change while workers are registered.
-- A new pool records this library's layout version (cfg field 'layout'); an existing pool of another
-- layout is refused (`kvrouter pool migrate|recreate` first), never re-stamped over data it cannot read.
-- A change of a knob the load order is scored by rescores it (lz, LZ.rescore) in the same call.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: pairs of (field, value) for every knob of knobs_gen.lua's CFG_FIELDS (statestore's knob table); 'bs' first.
-- Reply: {'ok'} | {'conflict', current block size} | {'layout_mismatch', found layout}.
-- Complexity: O(knobs); O(W log W) when prefill_load_scale, decode_active_request_weight or block_size
-- changes (every lz member is rescored: the load order is by those knobs).
bind(KEYS)
if redis.call('EXISTS', K_CFG) == 1 then
  local refused = pool_check()
  if refused then return refused end
end
local old = redis.call('HGET', K_CFG, 'bs')
if old and tonumber(old) ~= tonumber(ARGV[2]) and redis.call('HLEN', K_WK) > 0 then
  return {'conflict', tonumber(old)}
end
local was = redis.call('HGET', K_CFG, 'bin')   -- the knobs lz is scored by, before
redis.call('HSET', K_CFG, 'layout', LAYOUT, unpack(ARGV))
local v = redis.call('HMGET', K_CFG, unpack(CFG_FIELDS))
for i = 1, #v do v[i] = tonumber(v[i]) or 0 end
redis.call('HSET', K_CFG, 'bin', struct.pack('>' .. string.rep('d', #CFG_FIELDS), unpack(v)))
if was then
  local a, c = cfg_parse(was), LZ.knobs()
  if a.pls ~= c.pls or a.rw ~= c.rw or a.bs ~= c.bs then LZ.rescore() end
end
return {'ok'}
