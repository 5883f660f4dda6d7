-- resolve_parents.lua — read-only: map parent engine hashes of one worker to sequence hashes, so that
-- the caller can compute the sequence hashes of Stored blocks (XXH3 is not available in Lua) before
-- calling apply_events.lua, which re-verifies every mapping.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] worker id, then pairs: dp rank, engine hash (8 bytes).
-- Reply: {'ok', seq|'' ...} one 8-byte sequence hash (or '' when unknown) per pair; {'ok'} for an
--   unknown worker (the caller then predicts "not found" everywhere); {'unknown_pool'} | {'layout_mismatch', found layout}.
-- Complexity: O(pairs) HGETs.
bind(KEYS)
local refused = pool_check()
if refused then return refused end
local wp = redis.call('HGET', K_WK, ARGV[1])
if not wp then return {'ok'} end
local w = cmsgpack.unpack(wp)
local out = {'ok'}
for i = 2, #ARGV, 2 do
  local rank = tonumber(ARGV[i])
  local v = ''
  if rank and rank >= 0 and rank < w[W.DP] then
    local slot = w[W.SLOTS][rank + 1]
    v = redis.call('HGET', gkey(slot, ARGV[i + 1]), gfield(ARGV[i + 1])) or ''
  end
  out[#out + 1] = v
end
return out
