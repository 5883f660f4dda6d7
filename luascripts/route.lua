-- route.lua — one routing decision, atomically: release expired leases, filter, overlap (jump search over
-- the event and soft layers), cost, pick, and book (load, lease, session, approximate/predicted entries).
-- The arithmetic mirrors statestore/selection.go operation by operation (same IEEE double results).
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] mode: 'route' | 'explain' (books nothing) | 'query' (overlap scores only, changes nothing)
--       [2] now, ms  [3] request id  [4] sequence hashes, 8 bytes each, concatenated (D blocks)
--       [5] isl, tokens  [6] session id ('' none)  [7] pinned worker ('' none)  [8] random r in [0,1)
--       [9..8+V] overrides, one per knob of CFG_OVERRIDES (knobs_gen.lua, V of them), '' = pool value
--       [9+V] allowed worker count A, [10+V..9+V+A] allowed worker ids,
--       [10+V+A] excluded worker count X, [11+V+A..10+V+A+X] excluded worker ids (this request only).
-- Health (statestore/health.go): with unhealthy_after > 0 the whole hu hash is read once (it holds only the
-- workers marked unhealthy, so it is empty in a healthy pool); a marked worker in its window or being probed
-- is filtered 'unhealthy'; booking a half-open worker starts its probe (one HSET).
-- Reply (fractions as %.17g strings, never Lua numbers):
--   {'unknown_pool'} | {'layout_mismatch', found layout} | {'invalid'} (isl/blocks outside the pool's limits) | {'conflict'} (lease exists)
--   | {'noelig', reason, count, ...}
--   | {'ok', worker_id, dp_rank, url, overlap_blocks, required_blocks, cost, session_hit 0|1}
--   | {'explain', required_blocks, chosen (0-based, -1 none), session_hit, {reason, count, ...},
--        {{wid, rank, dev, host, disk, event, soft, depth, credit, prefill, decode, requests, cost, reason, url
--          [, prefill_rate, decode_coeff: cost_model ttft]}...}}
--   | {'scores', {wid, rank, blocks}...}
-- Complexity: O(D/32 + W·log 32) bucket HGETs on prefix-closed data (+ O(D) per rank with orphans or
-- non-device tiers), O(W) candidate work (loads `lv` one GET, unpacked in bulk; roster `ro` memoized by its stamp, one GET
-- only after it changed;
-- worker ids/urls sliced only where needed), holder tests by record-aligned string.find of the 4-byte slot
-- (only position 0's records are decoded), O(expired leases) releases, bounded reclamation (one ZCARD of sx
-- skips the soft sweep and the soft layer when the pool has no soft entries); query hashes are sliced only at
-- probed positions; without filters the candidate loops read the loads column only and skip the credit
-- arithmetic of ranks without overlap; booking soft entries: one HSETNX per new position (HGET + HSET where
-- one exists) and one ZADD per 512 positions.
bind(KEYS)
local mode, now, reqid, seqs = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local isl, session, pinned, rnd = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
local cfg, refused = cfg_get()
if not cfg then return refused end
local D = #seqs / 8
local nsx = nil   -- ZCARD of sx before reclamation (nil: not read); 0 means no soft entries at all
if mode ~= 'query' then
  if isl < 0 or isl > cfg.mpt or D > math.floor(isl / cfg.bs) then return {'invalid'} end
  release_expired(now)
  nsx = redis.call('ZCARD', K_SX)
  reclaim(now, 1, nsx > 0 and 32 or 0)
  sweep_sessions(now, cfg.sttl)
  if mode == 'route' and redis.call('HEXISTS', K_LS, reqid) == 1 then return {'conflict'} end
end

local RO = ros()
local N = RO.n
local SL = rslots()   -- candidate -> slot (read-only: memoized with the roster)
local live = rlive()  -- slot -> roster index (likewise)
local orph = {}
do
  local kv = redis.call('HGETALL', K_ORPH)
  for i = 1, #kv, 2 do if tonumber(kv[i + 1]) > 0 then orph[tonumber(kv[i])] = true end end
end
-- SEQ[i] = the 8-byte hash at query position i (0-based), sliced on first use: the jump search touches a
-- few positions.
local SEQ = setmetatable({}, {__index = function(t, i) local s = string.sub(seqs, i * 8 + 1, i * 8 + 8); t[i] = s; return s end})

-- Event layer: ER[i] = the raw entry at query position i ('' none): parent seq 8 ‖ is_child 1 ‖
-- {slot u32, children·8 + tiers i32}* (tiers = the record's last byte % 8). A slot is looked up with
-- string.find on its 4 bytes, accepting only matches aligned to a record, so no probe parses the other
-- holders' records.
local ER = {}
local function eraw(i)
  local s = ER[i]
  if not s then
    local o = i * 8
    local a, b = string.byte(seqs, o + 7, o + 8)   -- ebucket/efield, sliced from the blob
    s = redis.call('HGET', K_E .. ((a * 256 + b) % NB_E), string.sub(seqs, o + 1, o + 7)) or ''
    ER[i] = s
  end
  return s
end
local SK = {}
-- etier returns the tiers of slot's record at position i, or nil when it holds none there.
local function etier(i, slot)
  local s = eraw(i)
  if #s < 17 then return nil end
  local key = SK[slot]
  if not key then key = struct.pack('>I4', slot); SK[slot] = key end
  local from = 10
  while true do
    local p = string.find(s, key, from, true)
    if not p then return nil end
    if (p - 10) % 8 == 0 then
      local t = string.byte(s, p + 7) % 8
      if t ~= 0 then return t end
      return nil
    end
    from = p + 1
  end
end
-- Soft layer: SH[i] = {slot -> expiry}.
local SH = {}
local function sh(i)
  local h = SH[i]
  if h then return h end
  h = {}
  local s = redis.call('HGET', sbucket(SEQ[i]), SEQ[i])
  if s then
    for off = 1, #s, 12 do
      local slot, exp = struct.unpack('>I4d', s, off)
      h[slot] = exp
    end
  end
  SH[i] = h
  return h
end

-- jump_depths: the same search as memory_overlap.go jumpDepths (stride 32, same binary search).
local function jump_depths(at0, contains, d, depth)
  if d == 0 or #at0 == 0 then return end
  local active = at0
  local lo = 0
  while #active > 0 and lo < d - 1 do
    local hi = lo + 32
    if hi > d - 1 then hi = d - 1 end
    local keep = {}
    for _, s in ipairs(active) do
      if contains(hi, s) then
        keep[#keep + 1] = s
      else
        local l, r = lo, hi
        while r - l > 1 do
          local m = math.floor((l + r) / 2)
          if contains(m, s) then l = m else r = m end
        end
        depth[s] = l + 1
      end
    end
    active = keep
    lo = hi
  end
  for _, s in ipairs(active) do depth[s] = lo + 1 end
end

local ev = {}
if D > 0 and N > 0 then
  local at0 = {}
  local s0 = eraw(0)
  for off = 10, #s0 - 7, 8 do
    local s, w = struct.unpack('>I4i4', s0, off)
    local t = w % 8
    if t ~= 0 and live[s] and not orph[s] then at0[#at0 + 1] = s end
  end
  jump_depths(at0, function(i, s) return etier(i, s) ~= nil end, D, ev)
  for s in pairs(orph) do
    if live[s] then
      local d = 0
      while d < D and etier(d, s) do d = d + 1 end
      if d > 0 then ev[s] = d end
    end
  end
end
-- Tier split (memory: tierSplit) for ranks holding non-device blocks.
local OV = {}   -- slot -> {dev, host, disk, event, soft}
local ndc = nil
for s, d in pairs(ev) do
  if not ndc then
    ndc = {}
    local kv = redis.call('HGETALL', K_ND)
    for i = 1, #kv, 2 do ndc[tonumber(kv[i])] = tonumber(kv[i + 1]) end
  end
  local dev, host, disk = d, 0, 0
  if ndc[s] then
    dev = 0
    for i = 0, d - 1 do
      local t = etier(i, s)
      if bit.band(t, 1) ~= 0 then dev = dev + 1 elseif bit.band(t, 2) ~= 0 then host = host + 1 else disk = disk + 1 end
    end
  end
  OV[s] = {dev, host, disk, d, 0}
end
if D > 0 and nsx ~= 0 and redis.call('ZCARD', K_SX) > 0 then
  local soft = {}
  local at0 = {}
  for s, exp in pairs(sh(0)) do
    if exp > now and live[s] then at0[#at0 + 1] = s end
  end
  jump_depths(at0, function(i, s) local e = sh(i)[s]; return e ~= nil and e > now end, D, soft)
  for s, d in pairs(soft) do
    local o = OV[s]
    if not o then o = {0, 0, 0, 0, 0}; OV[s] = o end
    o[5] = d
  end
end
-- effective: soft blocks beyond the event depth count as device blocks.
local function effective(o)
  if not o then return 0, 0, 0, 0 end
  local dev, depth = o[1], o[4]
  if o[5] > o[4] then dev = dev + o[5] - o[4]; depth = o[5] end
  return dev, o[2], o[3], depth
end

if mode == 'query' then
  local out = {'scores'}
  for i = 1, N do
    local _, _, _, d = effective(OV[SL[i]])
    if d > 0 then
      local _, _, rank, _, _, _, wid = rrec(i)
      out[#out + 1] = {wid, rank, d}
    end
  end
  return out
end

-- Knobs with the request's overrides (from here on cfg holds the effective values).
local nexta   -- ARGV index of the allowed worker count
cfg, nexta = cfg_override(cfg, ARGV, 9)
local osc, hw, dw, pls = cfg.osc, cfg.hw, cfg.dw, cfg.pls
local decay_d, rw, temp, bpf, bdf = cfg.decay, cfg.rw, cfg.temp, cfg.bpf, cfg.bdf
local bs = cfg.bs
local required = math.floor((isl + bs - 1) / bs)
-- cost_model ttft: every candidate's coefficients (TT.coeffs: TC[2i-1] prefill rate, TC[2i] decode coeff)
local TC = (cfg.cm == 1 and mode ~= 'query') and TT.coeffs(cfg, N) or nil
local allowed = nil
local na = tonumber(ARGV[nexta])
if na > 0 then
  allowed = {}
  for i = 1, na do allowed[ARGV[nexta + i]] = true end
end
local seen = nil
if cfg.wttl > 0 then
  seen = {}
  local kv = redis.call('HGETALL', K_SEEN)
  for i = 1, #kv, 2 do seen[kv[i]] = tonumber(kv[i + 1]) end
end
local function is_live(wid) return cfg.wttl == 0 or now < (seen[wid] or 0) + cfg.wttl end
-- Loads of every candidate, one GET: LV[3i-2..3i] = prefill tokens, decode blocks, requests.
-- (memoized across calls under the loads stamp, lv_touch in lib.lua; this call's own releases above have
-- already been applied to it). The memo is read-only until the booking below.
local LV, lvstamp = lv_memo_get(N)
if not LV and N > 0 then
  local lvs = redis.call('GET', K_LD) or ''
  if #lvs == 24 * N then
    LV = bulk_unpack(lvs, 1, N, 'ddd', 3, 0)
    if lvstamp then lv_memo_put(lvstamp, LV) end
  end
end
if not LV then LV = {}; for j = 1, 3 * N do LV[j] = 0 end end
local MN = (bpf > 0) and rcol(ROFF.MNBT, 'd', 8) or nil
local TK = (bdf > 0) and rcol(ROFF.TKV, 'd', 8) or nil
local excluded = nil
local nx = tonumber(ARGV[nexta + 1 + na])
if nx > 0 then
  excluded = {}
  for i = 1, nx do excluded[ARGV[nexta + 1 + na + i]] = true end
end
-- HB[wid]: marked and skipped (in its back-off window, or probed by another decision); HO[wid] = {until,
-- backoff}: half-open, the decision that books it takes the probe. nil when empty.
local HB, HO = nil, nil
if cfg.ua > 0 then
  local kv = redis.call('HGETALL', K_HU)
  for i = 1, #kv, 2 do
    local u, p, b = struct.unpack('>ddd', kv[i + 1])
    if now < u or now < p then
      HB = HB or {}
      HB[kv[i]] = true
    else
      HO = HO or {}
      HO[kv[i]] = {u, b}
    end
  end
end
local widf = allowed or pinned ~= '' or cfg.wttl > 0 or excluded or HB

-- CREASON[i]: candidate i's filter reason ('' eligible); nil when no filter applies (every one eligible).
local CREASON = nil
local reasons, rorder = {}, {}
local minPrefill, anyEligible = 0, false
if not widf and not MN and not TK then
  -- minPrefill feeds only the credit decay: skip the pass without it.
  for i = 1, decay_d > 0 and N or 0 do
    local p = LV[3 * i - 2]
    if not anyEligible or p < minPrefill then minPrefill, anyEligible = p, true end
  end
else CREASON = {} end
for i = 1, CREASON and N or 0 do
  local p, d = LV[3 * i - 2], LV[3 * i - 1]
  local reason = ''
  if widf then
    local wid = rwid(i)
    if not is_live(wid) then reason = R_NOT_LIVE
    elseif allowed and not allowed[wid] then reason = R_NOT_ALLOWED
    elseif pinned ~= '' and wid ~= pinned then reason = R_NOT_PINNED
    elseif excluded and excluded[wid] then reason = R_EXCLUDED
    elseif HB and HB[wid] then reason = R_UNHEALTHY
    end
  end
  if reason == '' then
    if MN and MN[i] > 0 and p > bpf * MN[i] then reason = R_BUSY_PREFILL
    elseif TK and TK[i] > 0 and d > bdf * TK[i] then reason = R_BUSY_DECODE
    end
  end
  if reason ~= '' then
    if not reasons[reason] then reasons[reason] = 0; rorder[#rorder + 1] = reason end
    reasons[reason] = reasons[reason] + 1
  elseif not anyEligible or p < minPrefill then
    minPrefill, anyEligible = p, true
  end
  CREASON[i] = reason
end
local function creason(i) return CREASON and CREASON[i] or '' end
-- cost_of: candidate i's cost and credit (selection.go Cost; cost_model ttft: ttft_route.go TTFTCandidate,
-- credit 0), same operation order.
local function cost_of(i)
  local p = LV[3 * i - 2]
  local o = OV[SL[i]]
  if TC then
    local own = isl - effective(o) * bs   -- BookedPrefill: the device overlap (soft included) is not computed
    if own < 0 then own = 0 end
    local rate = TC[2 * i - 1]
    return (p / rate + own / rate) + TC[2 * i] * LV[3 * i - 1], 0
  end
  local credit, prefill = 0, (p + isl) / bs
  if o then
    local dev, host, disk = effective(o)
    local decay = 1.0
    if decay_d > 0 and required > 0 then
      local excess = p - minPrefill
      if excess < 0 then excess = 0 end
      decay = 1 / (1 + decay_d * (excess / bs) / required)
    end
    credit = osc * decay * dev + hw * host + dw * disk
    prefill = prefill - credit
  end
  -- (no overlap: credit = osc·decay·0 + hw·0 + dw·0 = +0 exactly (knobs are finite, >= 0), raw - 0 = raw)
  if prefill < 0 then prefill = 0 end
  return pls * prefill + (LV[3 * i - 1] + required) + rw * LV[3 * i], credit
end
-- costs: the eligible candidates' costs. With temperature <= 0 (and not explaining) one pass keeps only
-- the minimum and its ties in roster order (TIES), which is all pick's rule floor(r·k) reads; otherwise
-- every eligible cost goes to COSTS/CIDX for the softmax (and CCOST/CCRED keep every candidate's terms for
-- explain).
local COSTS, CIDX, TIES, CMIN = {}, {}, nil, nil
local CCOST, CCRED = nil, nil
if mode == 'explain' or temp > 0 then
  CCOST, CCRED = {}, {}
  local nc = 0
  for i = 1, N do
    local cost, credit = cost_of(i)
    CCOST[i], CCRED[i] = cost, credit
    if not CREASON or CREASON[i] == '' then nc = nc + 1; COSTS[nc] = cost; CIDX[nc] = i end
  end
else
  -- A candidate holding none of the prompt costs cost_of's no-overlap arithmetic, inlined (same
  -- operations in the same order: credit is +0 there and never subtracted), so the per-candidate work of
  -- the common case is a few table reads and no call.
  TIES = {}
  for i = 1, N do
    if not CREASON or CREASON[i] == '' then
      local cost
      if TC or OV[SL[i]] then cost = cost_of(i)
      else
        local j = 3 * i
        local prefill = (LV[j - 2] + isl) / bs
        if prefill < 0 then prefill = 0 end
        cost = pls * prefill + (LV[j - 1] + required) + rw * LV[j]
      end
      if not CMIN or cost < CMIN then CMIN = cost; TIES = {i}
      elseif cost == CMIN then TIES[#TIES + 1] = i end
    end
  end
end
-- Session affinity.
local chosen, shit = -1, false
local sdel = false
if cfg.sttl > 0 and session ~= '' then
  local sp = redis.call('HGET', K_SS, session)
  if sp then
    local s = cmsgpack.unpack(sp)
    local ri = rid_index(s[S.RID])
    if not ri or not is_live(rwid(ri)) or (s[S.ACTIVE] == 0 and now >= s[S.IDLE] + cfg.sttl) then
      sdel = true
    elseif creason(ri) == '' then
      chosen, shit = ri, true
    end
  end
end
-- Pick (selection.go Pick).
local function fexp(x)
  -- selection.go Exp: Go's portable exp, operation by operation.
  if x ~= x or x == math.huge then return x end
  if x == -math.huge then return 0 end
  if x > 7.09782712893383973096e+02 then return math.huge end
  if x < -7.45133219101941108420e+02 then return 0 end
  local nz = 1.0 / 268435456
  if -nz < x and x < nz then return 1 + x end
  local k = 0
  if x < 0 then k = math.ceil(1.44269504088896338700e+00 * x - 0.5)
  elseif x > 0 then k = math.floor(1.44269504088896338700e+00 * x + 0.5) end
  local hi = x - k * 6.93147180369123816490e-01
  local lo = k * 1.90821492927058770002e-10
  local r = hi - lo
  local t = r * r
  local poly = -1.65339022054652515390e-06 + t * 4.13813679705723846039e-08
  poly = 6.61375632143793436117e-05 + t * poly
  poly = -2.77777777770155933842e-03 + t * poly
  poly = 1.66666666666666657415e-01 + t * poly
  local c = r - t * poly
  local y = 1 - ((lo - (r * c) / (2 - c)) - hi)
  return math.ldexp(y, k)
end
local function pick(cs, T, r)
  local n = #cs
  if n == 0 then return -1 end
  local cmin, cmax = cs[1], cs[1]
  for i = 2, n do
    if cs[i] < cmin then cmin = cs[i] end
    if cs[i] > cmax then cmax = cs[i] end
  end
  if T <= 0 then
    local k = 0
    for i = 1, n do if cs[i] == cmin then k = k + 1 end end
    local want = math.floor(r * k)
    if want >= k then want = k - 1 end
    for i = 1, n do
      if cs[i] == cmin then
        if want == 0 then return i end
        want = want - 1
      end
    end
    return n
  end
  if cmax == cmin then
    local i = math.floor(r * n)
    if i >= n then i = n - 1 end
    return i + 1
  end
  local span = (cmax - cmin) * T
  local total = 0.0
  local w = {}
  for i = 1, n do
    w[i] = fexp(-(cs[i] - cmin) / span)
    total = total + w[i]
  end
  local cum = 0.0
  for i = 1, n do
    cum = cum + w[i] / total
    if cum > r then return i end
  end
  return n
end
if chosen < 0 then
  if TIES then
    -- pick's temperature-0 rule on the ties alone: the floor(r·k)-th of the k minima (clamped).
    local k = #TIES
    if k > 0 then
      local want = math.floor(rnd * k)
      if want >= k then want = k - 1 end
      chosen = TIES[want + 1]
    end
  elseif #COSTS > 0 then
    chosen = CIDX[pick(COSTS, temp, rnd)]
  end
end
if sdel then
  redis.call('HDEL', K_SS, session)
  redis.call('ZREM', K_SY, session)
end

local function f17(x) return string.format('%.17g', x) end
if mode == 'explain' then
  local rs = {}
  for _, k in ipairs(rorder) do rs[#rs + 1] = k; rs[#rs + 1] = reasons[k] end
  local cl = {}
  for i = 1, N do
    local o = OV[SL[i]]
    local dev, host, disk, depth = effective(o)
    o = o or {0, 0, 0, 0, 0}
    local _, _, rank, _, _, _, wid, url = rrec(i)
    cl[i] = {wid, rank, dev, host, disk, o[4], o[5], depth, f17(CCRED[i]), LV[3 * i - 2], LV[3 * i - 1], LV[3 * i], f17(CCOST[i]), creason(i), url}
    if TC then cl[i][16], cl[i][17] = f17(TC[2 * i - 1]), f17(TC[2 * i]) end
  end
  return {'explain', required, chosen - 1 >= 0 and chosen - 1 or -1, shit and 1 or 0, rs, cl}
end
if chosen < 0 then
  local out = {'noelig'}
  for _, k in ipairs(rorder) do out[#out + 1] = k; out[#out + 1] = reasons[k] end
  return out
end

-- Book.
local slot, rid, crank, _, _, ckve, cwid, curl = rrec(chosen)
local dev, _, _, depth = effective(OV[slot])
local booked = isl - dev * bs
if booked < 0 then booked = 0 end
local chosen_cost = cost_of(chosen)   -- before the booking changes LV (it may be the memo)
local lx1, lx2 = LV[3 * chosen - 2] + booked, LV[3 * chosen - 1]   -- ttft's features, before booking
lv_set(chosen, LV[3 * chosen - 2] + booked, LV[3 * chosen - 1] + required, LV[3 * chosen] + 1)
if HO and HO[cwid] then
  local h = HO[cwid]
  redis.call('HSET', K_HU, cwid, struct.pack('>ddd', h[1], now + h[2], h[2]))
end
local expiry = now + cfg.lttl
local lsess, lgen = '', 0
if cfg.sttl > 0 and session ~= '' then
  local s
  if not shit then
    if redis.call('HLEN', K_SS) >= SESS_CAP then
      redis.call('HINCRBY', K_SC, 'sover', 1) -- over the cap: route without a binding, counted
    else
      local g = redis.call('HINCRBY', K_SC, 'sgen', 1)
      s = {rid, cwid, g, 0, 0}   -- S_* order: rank id, worker id, generation, active, idle since
    end
  else
    s = cmsgpack.unpack(redis.call('HGET', K_SS, session))
    if s[S.ACTIVE] == 0 then redis.call('ZREM', K_SY, session) end
  end
  if s then
    s[S.ACTIVE] = s[S.ACTIVE] + 1
    redis.call('HSET', K_SS, session, cmsgpack.pack(s))
    lsess, lgen = session, s[S.GEN]
  end
end
local lrec = {rid, booked, required, expiry, lsess, lgen, chosen}   -- L_* order
if TC then lrec[L.X1], lrec[L.X2], lrec[L.T] = lx1, lx2, now end
redis.call('HSET', K_LS, reqid, cmsgpack.pack(lrec))
redis.call('ZADD', K_LX, expiry, reqid)
local ttl = cfg.pttl
local kve = ckve
if kve < 0 then kve = cfg.kve end
if kve == 0 then ttl = cfg.attl end
if ttl > 0 and D > 0 then
  -- Soft entries, last position first: a position with no soft entry yet costs one HSETNX; the first one
  -- that exists switches the rest (the prompt's earlier, more shared blocks) to read-modify-write. The
  -- sweep order is one ZADD per 512 members.
  local sexp = now + ttl
  local key4 = struct.pack('>I4', slot)
  local rec = key4 .. struct.pack('>d', sexp)
  local probe = true
  local zargs = {}
  for i = D - 1, 0, -1 do
    local seq = SEQ[i]
    local b = sbucket(seq)
    if not (probe and redis.call('HSETNX', b, seq, rec) == 1) then
      probe = false
      local s = redis.call('HGET', b, seq)
      local parts, found = {}, false
      if s then
        for off = 1, #s, 12 do
          if string.sub(s, off, off + 3) == key4 then parts[#parts + 1] = rec; found = true
          else parts[#parts + 1] = string.sub(s, off, off + 11) end
        end
      end
      if not found then parts[#parts + 1] = rec end
      redis.call('HSET', b, seq, table.concat(parts))
    end
    zargs[#zargs + 1] = sexp
    zargs[#zargs + 1] = seq .. key4
    if #zargs >= 1024 then redis.call('ZADD', K_SX, unpack(zargs)); zargs = {} end
  end
  if #zargs > 0 then redis.call('ZADD', K_SX, unpack(zargs)) end
end
return {'ok', cwid, crank, curl, depth, required, f17(chosen_cost), shit and 1 or 0}
