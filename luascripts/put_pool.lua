-- put_pool.lua — create or update a pool's knobs. block_size cannot change while workers are registered.
-- A new pool records this library's layout version (cfg field 'layout') and its event index's bucket count
-- (sc field 'egn': an index that grows, lib.lua lh_params); an existing pool of another
-- layout is refused (`kvrouter pool migrate|recreate` first), never re-stamped over data it cannot read.
-- A change of a knob the load order is scored by (prefill_load_scale, decode_active_request_weight,
-- block_size) on a pool with lz members does not take effect here: the knobs become pending and lz is
-- rescored in bounded steps (rescore_step.lua; lib.lua "Rescoring in steps"), the caller driving them with
-- the generation replied. Until the switch every operation keeps the knobs before this call, all of them.
-- A call while a rescoring is under way: back to the pool's current scoring knobs cancels it (applied at
-- once); the pending scoring knobs again keeps its walk (the other knobs updated); others restart it.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: pairs of (field, value) for every knob of knobs_gen.lua's CFG_FIELDS (statestore's knob table); 'bs' first.
-- Reply: {'ok'} | {'rescoring', generation} | {'conflict', current block size} | {'layout_mismatch', found layout}.
-- Complexity: O(knobs) (starting or cancelling a rescoring: UNLINK of the partial lzn, O(1) on this thread).
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
local knobs = {}
for i = 1, #ARGV, 2 do knobs[ARGV[i]] = ARGV[i + 1] end
local v = {}
for i, f in ipairs(CFG_FIELDS) do
  v[i] = tonumber(knobs[f] or redis.call('HGET', K_CFG, f)) or 0
end
local bin = struct.pack('>' .. string.rep('d', #CFG_FIELDS), unpack(v))
local function scoring_eq(a, c) return a.pls == c.pls and a.rw == c.rw and a.bs == c.bs end
if was then
  local a, c = cfg_parse(was), cfg_parse(bin)
  if not scoring_eq(a, c) and redis.call('EXISTS', K_LZ) == 1 then
    local pending = LZ.pending()
    if pending and scoring_eq(pending, c) then
      redis.call('HSET', K_CFG, 'pbin', bin, 'pargv', cmsgpack.pack(ARGV))
      return {'rescoring', tonumber(redis.call('HGET', K_CFG, 'rgen'))}
    end
    return {'rescoring', LZ.begin(bin, cmsgpack.pack(ARGV))}
  end
  if LZ.pending() then LZ.cancel() end
end
redis.call('HSET', K_CFG, 'layout', LAYOUT, 'bin', bin, unpack(ARGV))
-- A new pool's event index grows (lib.lua lh_params): its bucket count, from the base.
if not was then redis.call('HSET', K_SC, 'egn', istr(NB_E)) end
return {'ok'}
