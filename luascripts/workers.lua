-- workers.lua — one page of a pool's workers, in id order (byte order), with loads per rank (expired
-- leases are released first).
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] now, ms  [2] after: list the workers whose id sorts after this one ('' = from the first)
--       [3] limit: most workers in the page (>= 1; statestore clamps it to MaxWorkersPage).
-- Reply: {'unknown_pool'} | {'layout_mismatch', found layout} | {'ok', next ('' = no worker follows, else the
--          page's last id: the cursor for the next page), {wid, url, dp, tkv, mnbt, kve, last_seen,
--          {{prefill, decode, requests, held, last_event_id ('' none), epoch, degraded 0|1,
--            ttft calibration ('>dddddd' as stored in tc, '' none)}...},
--          {consecutive_failures, unhealthy_until_ms, probe_until_ms, backoff_ms}}...}.
-- Complexity: O(expired leases) (release_expired, amortised: each lease is released once) + O(log W) roster
-- reads to find the page's first rank + O(limit · dp) for the page (7 HMGETs for the page, one GETRANGE per
-- rank); nothing else grows with the pool.
-- The roster is read only through lib.lua's accessors (ros().n, rwid, rid_locate, ld_read): the page's ranks
-- are consecutive candidates (candidate order = worker id bytes, then dp rank = wz's order), so after a binary
-- search for the first one every rank's position is rid_locate's O(1) hint.
bind(KEYS)
local now, after, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local refused = pool_check()
if refused then return refused end
release_expired(now)
local ids = redis.call('ZRANGE', K_WZ, after == '' and '-' or '(' .. after, '+', 'BYLEX', 'LIMIT', 0, limit + 1)
local nxt = ''
if #ids > limit then
  ids[#ids] = nil
  nxt = ids[#ids]
end
local out = {'ok', nxt}
if #ids == 0 then return out end

-- hint: roster index of the page's first candidate (the first whose worker id is not below ids[1], in
-- byte order: lib.lua's wid_lt).
local lo, hi = 1, ros().n + 1
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  if wid_lt(rwid(mid), ids[1]) then lo = mid + 1 else hi = mid end
end
local hint = lo

-- hmget_all: HMGET of many fields, in calls of at most 4,000 (unpack's stack limit); false for a missing one.
local function hmget_all(key, fields)
  local res = {}
  for from = 1, #fields, 4000 do
    local to = from + 3999
    if to > #fields then to = #fields end
    local v = redis.call('HMGET', key, unpack(fields, from, to))
    for j = 1, #v do res[from + j - 1] = v[j] end
  end
  return res
end
-- per-worker and per-rank hash fields of the whole page in one HMGET each (not one call per rank)
local wps = hmget_all(K_WK, ids)
local seen = hmget_all(K_SEEN, ids)
local hcs = hmget_all(K_HC, ids)
local hus = hmget_all(K_HU, ids)
local ws, ff, hf, tf = {}, {}, {}, {}
for k = 1, #ids do
  local w = cmsgpack.unpack(wps[k])
  ws[k] = w
  for r = 1, w[W.DP] do
    local rid = w[W.RIDS][r]
    ff[#ff + 1], ff[#ff + 2], ff[#ff + 3] = 'e' .. rid, 'i' .. rid, 'g' .. rid
    hf[#hf + 1] = 'h' .. w[W.SLOTS][r]
    tf[#tf + 1] = '' .. rid
  end
end
local fence = hmget_all(K_FENCE, ff)
local held = hmget_all(K_SC, hf)
local tcs = hmget_all(K_TC, tf)   -- cost_model ttft calibration per rank (absent: none)
local j = 0   -- ranks listed so far
for k, id in ipairs(ids) do
  local w = ws[k]
  local ranks = {}
  for r = 1, w[W.DP] do
    j = j + 1
    local i = rid_locate(w[W.RIDS][r], hint)
    local prefill, decode, requests   -- nil (the rank left the roster) encodes as no value
    if i then
      prefill, decode, requests = ld_read(i)
      hint = i + 1
    end
    ranks[r] = {tonumber(prefill), tonumber(decode), tonumber(requests), tonumber(held[j] or '0'),
      fence[3 * j - 1] or '', fence[3 * j - 2] or '', fence[3 * j] == '1' and 1 or 0, tcs[j] or ''}
  end
  local h = {tonumber(hcs[k] or '0'), 0, 0, 0}
  if hus[k] then h[2], h[3], h[4] = struct.unpack('>ddd', hus[k]) end
  out[#out + 1] = {id, w[W.URL], w[W.DP], w[W.TKV], w[W.MNBT], w[W.KVE], tonumber(seen[k] or '0'), ranks, h}
end
return out
