-- workers.lua — list a pool's workers with loads per rank (expired leases are released first).
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] now, ms.
-- Reply: {'unknown_pool'} | {'layout_mismatch', found layout} | {'ok', {wid, url, dp, tkv, mnbt, kve, last_seen,
--          {{prefill, decode, requests, held, last_event_id ('' none), epoch, degraded 0|1}...},
--          {consecutive_failures, unhealthy_until_ms, probe_until_ms, backoff_ms}}...}.
-- Complexity: O(W · dp).
bind(KEYS)
local now = tonumber(ARGV[1])
local refused = pool_check()
if refused then return refused end
release_expired(now)
local out = {'ok'}
for _, id in ipairs(redis.call('ZRANGE', K_WZ, 0, -1)) do
  local w = cmsgpack.unpack(redis.call('HGET', K_WK, id))
  local ranks = {}
  for r = 1, w[2] do
    local rid, slot = w[6][r], w[7][r]
    local i = rid_index(rid)
    local l = {}
    if i then l[1], l[2], l[3] = ld_read(i) end
    local f = redis.call('HMGET', K_FENCE, 'e' .. rid, 'i' .. rid, 'g' .. rid)
    ranks[r] = {tonumber(l[1]), tonumber(l[2]), tonumber(l[3]), tonumber(redis.call('HGET', K_SC, 'h' .. slot) or '0'),
      f[2] or '', f[1] or '', f[3] == '1' and 1 or 0}
  end
  local h = {tonumber(redis.call('HGET', K_HC, id) or '0'), 0, 0, 0}
  local hu = redis.call('HGET', K_HU, id)
  if hu then h[2], h[3], h[4] = struct.unpack('>ddd', hu) end
  out[#out + 1] = {id, w[1], w[2], w[3], w[4], w[5], tonumber(redis.call('HGET', K_SEEN, id) or '0'), ranks, h}
end
return out
