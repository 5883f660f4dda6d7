-- put_pool.lua — create or update a pool's knobs. block_size cannot change while workers are registered.
--
-- KEYS: the pool's key list (see lib.lua).
-- ARGV: pairs of (field, value) for every knob of lib.lua's CFG_FIELDS; 'bs' first.
-- Reply: {'ok'} | {'conflict', current block size}.
-- Complexity: O(knobs).
local old = redis.call('HGET', K_CFG, 'bs')
if old and tonumber(old) ~= tonumber(ARGV[2]) and redis.call('HLEN', K_WK) > 0 then
  return {'conflict', tonumber(old)}
end
redis.call('HSET', K_CFG, unpack(ARGV))
local v = redis.call('HMGET', K_CFG, unpack(CFG_FIELDS))
for i = 1, #v do v[i] = tonumber(v[i]) or 0 end
redis.call('HSET', K_CFG, 'bin', struct.pack(CFG_FMT, unpack(v)))
return {'ok'}
