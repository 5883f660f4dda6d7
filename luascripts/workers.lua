-- workers.lua — list a pool's workers with loads per rank (expired leases are released first).
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] now, ms.
-- Reply: {'unknown_pool'} | {'layout_mismatch', found layout} | {'ok', {wid, url, dp, tkv, mnbt, kve, last_seen,
--          {{prefill, decode, requests, held, last_event_id ('' none), epoch, degraded 0|1,
--            ttft calibration ('>dddddd' as stored in tc, '' none)}...},
--          {consecutive_failures, unhealthy_until_ms, probe_until_ms, backoff_ms}}...}.
-- Complexity: O(W · dp) (one pass over the roster's rank-id column, then O(1) per rank).
bind(KEYS)
local now = tonumber(ARGV[1])
local refused = pool_check()
if refused then return refused end
release_expired(now)
local out = {'ok'}
-- rank id -> roster index, one pass over the rank-id column (not one roster scan per rank)
local at = {}
for i, rid in ipairs(rcol(ROFF.RID, 'I4', 4)) do at[rid] = i end
for _, id in ipairs(redis.call('ZRANGE', K_WZ, 0, -1)) do
  local w = cmsgpack.unpack(redis.call('HGET', K_WK, id))
  local ranks = {}
  for r = 1, w[W.DP] do
    local rid, slot = w[W.RIDS][r], w[W.SLOTS][r]
    local i = at[rid]
    local prefill, decode, requests   -- nil (the rank left the roster) encodes as no value
    if i then prefill, decode, requests = ld_read(i) end
    local f = redis.call('HMGET', K_FENCE, 'e' .. rid, 'i' .. rid, 'g' .. rid)
    ranks[r] = {tonumber(prefill), tonumber(decode), tonumber(requests), tonumber(redis.call('HGET', K_SC, 'h' .. slot) or '0'),
      f[2] or '', f[1] or '', f[3] == '1' and 1 or 0, redis.call('HGET', K_TC, '' .. rid) or ''}
  end
  local h = {tonumber(redis.call('HGET', K_HC, id) or '0'), 0, 0, 0}
  local hu = redis.call('HGET', K_HU, id)
  if hu then h[2], h[3], h[4] = struct.unpack('>ddd', hu) end
  out[#out + 1] = {id, w[W.URL], w[W.DP], w[W.TKV], w[W.MNBT], w[W.KVE], tonumber(redis.call('HGET', K_SEEN, id) or '0'), ranks, h}
end
return out
