-- route.lua — one routing decision, atomically: release expired leases, filter, overlap (jump search over
-- the event and soft layers), cost, pick, and book (load, lease, session, approximate/predicted entries).
-- The arithmetic mirrors statestore/selection.go operation by operation (same IEEE double results).
--
-- KEYS: the pool's key list (see lib.lua; route, the operation this module returns, starts with bind(KEYS)).
-- ARGV: [1] mode: 'route' | 'explain' (books nothing) | 'explain_page' (one page of a paged explain, books
--       nothing) | 'query' (overlap scores only, changes nothing)
--       [2] now, ms  [3] request id  [4] sequence hashes, 8 bytes each, concatenated (D blocks)
--       [5] isl, tokens  [6] session id ('' none)  [7] pinned worker ('' none)  [8] random r in [0,1)
--       [9] overrides: '' none, else one value per knob of CFG_OVERRIDES (knobs_gen.lua) joined by ',',
--       '' = pool value (lib.lua cfg_override)
--       [10] allowed worker count A, [11..10+A] allowed worker ids,
--       [11+A] excluded worker count X, [12+A..11+A+X] excluded worker ids (this request only).
--       Paging (T = 12+A+X), explain: [T] page size P, candidates ('' or absent: no limit); explain_page:
--       [T] first, [T+1] last roster index of the page (1-based), [T+2] the credit decay's reference
--       minPrefill, tokens (the head reply's). Route: [T] the full-scan bound S, ranks: a roster of at most
--       S candidates is decided by the full scan even where choose_fast may decide ('' or absent: 0, the
--       fast path whenever it qualifies). Both decide identically (each is exact); S only picks the cheaper
--       in Redis CPU (statestore.fullScanMaxRanks says why 64). Then [T+1] release count R ('' or absent:
--       0) and [T+2..T+1+R] request ids whose leases this call ends as lease.lua's 'done' would at now,
--       right after the expired ones (prepare; statestore.RouteRequest.Releases: the `done`s a router
--       coalesced onto its next route), whenever validate_route passes.
-- Paged explain (statestore/redis_explain.go assembles it; SPEC §8: every call bounded): 'explain' on a
-- roster of at most P candidates is the one-call explain (one atomic snapshot). On a larger roster it is
-- the head: route's own decision path (choose_fast at temperature 0; prepare, releases and the session
-- lookup as route) answering {'head', ...} with the decision and the inputs every page shares; then one
-- 'explain_page' call per P roster positions reports those candidates (overlaps computed for the page's
-- ranks only, liveness by HMGET of their ids, loads by one GETRANGE per chunk, busy fields and ttft
-- coefficients per candidate) and its reason counts.
-- Each reply carries the roster stamp (sc 'rv') and size, so Go sees a roster changed between the calls.
-- Health (statestore/health.go): with unhealthy_after > 0 the whole hu hash is read once (it holds only the
-- workers marked unhealthy, so it is empty in a healthy pool); a marked worker in its window or being probed
-- is filtered 'unhealthy'; booking a half-open worker starts its probe (one HSET).
-- Reply (fractions as %.17g strings, never Lua numbers):
--   {'unknown_pool'} | {'layout_mismatch', found layout} | {'invalid'} (isl/blocks outside the pool's limits) | {'conflict'} (lease exists)
--   | {'noelig', reason, count, ...}
--   | {'ok', worker_id, dp_rank, url, overlap_blocks, required_blocks, cost, session_hit 0|1, fast 0|1}
--     (fast: choose_fast decided, not the full scan; the store counts these for tests)
--   | {'explain', required_blocks, chosen (0-based, -1 none), session_hit, {reason, count, ...},
--        candidates: every candidate's row, packed (explain_rows)}
--   | {'scores', {wid, rank, blocks}...}
--   | {'head', roster stamp ('' none), N, required_blocks, chosen (0-based, -1 none), session_hit, minPrefill, fast 0|1}
--   | {'page', roster stamp, N, {reason, count, ...}, the page's candidates packed as in 'explain'}
-- Complexity: O(log D + H·log D) bucket HGETs on prefix-closed data for H holders (windows doubling from 32)
-- (+ O(D) per rank with orphans or non-device tiers). Candidate work: temperature 0 in 'route' mode (choose_fast): O(H + groups
-- read + G²·log² W for G tied groups) ZRANGE/ZCOUNT/GETRANGE calls on lz/lv, independent of the pool size W,
-- + O(dead workers) under worker_ttl_ms (sz) + O(ranks filtered ahead) for the credit decay's minimum (lp);
-- the roster, its slot map and the worker ids are memoized (re-read after a roster change only).
-- An explain page: O(page + position-0 holders), the page's candidates only (see "Paged explain" above).
-- Otherwise (one-call explain, temperature > 0, a scoring override, nothing eligible): O(W) candidate work (loads
-- lv_all, one MGET of the loads chunks, unpacked in bulk, or the loads memo; roster memoized by its stamp,
-- only its changed chunks re-read;
-- worker ids/urls sliced only where needed), holder tests by record-aligned string.find of the 4-byte slot
-- (only position 0's records are decoded), O(expired leases) releases, bounded reclamation (one ZCARD of sx
-- skips the soft sweep and the soft layer when the pool has no soft entries); query hashes are sliced only at
-- probed positions; without filters the candidate loops read the loads column only and skip the credit
--
-- Form: a module (luascripts.Route.Module). This file runs once, when the library is loaded, and returns
-- the operation, route(KEYS, ARGV): its functions are created once, not on every call (a closure created
-- per call costs a walk of the open upvalues per captured local: +10 % Redis instructions per decision once the
-- file was cut into functions). They share the per-call state below as upvalues, which route resets first
-- (read_request, reset_state). At load time Redis 7.0 exposes no standard library (no string, struct,
-- setmetatable): this level holds only constants and function definitions.
--
-- Reading guide. Each named local function mirrors the Go function of the memory store it names
-- (statestore/memory_route.go, memory_select.go, memory_overlap.go, selection.go); route, at the end, is
-- the main sequence, in the order of memory_route.go Route:
--   prepare (validate_route)                         → overlaps (jump_depths, linear_depth, tier_split)
--   → [query: scores] → apply_overrides, fast_allowed, new_route_filter, read_loads
--   → universe, min_eligible_prefill → bound_rank → choose_fast (pick_tied) or evaluate (filter_reason,
--   cost_of, pick) → [explain: explain | nothing eligible: no_eligible] → decision → book.

-- The event entry codec's offsets (lib.lua ENT) as locals: event_tiers reads them once per probe.
local E_FIRST, E_REC, E_TIER_BYTE, E_TIERS = ENT.FIRST, ENT.REC, ENT.TIER_BYTE, ENT.TIERS

-- Per-call state: the request (read_request), then what the steps of the main sequence set (reset_state
-- clears it first: nothing survives from one call to the next, but for the SK memo below).
local mode, now, reqid, seqs, isl, session, pinned, rnd   -- ARGV[1..8] (see above)
local nows   -- ARGV[2] as sent (now's decimal string: release_expired passes it on unformatted)
local D                 -- query blocks
local SEQ, ER, SH       -- query hashes and index entries read this call (see below)
-- SK: slot -> its packed bytes (ENT.SLOT_FMT), event_tiers' search key. The one memo here kept across calls
-- (like lib.lua's ISTR): a pure function of the slot number, shared by every pool. In pages of SK_PAGE slots
-- (SK[slot − slot % SK_PAGE][slot % SK_PAGE + 1]), as ISTR and for the same reason: the collector marks a
-- table's strings in one step, and one table of 4,096 slot keys was one ~0.2 ms step. Emptied at SK_MAX pages.
local SK, SK_N, SK_MAX, SK_PAGE = {}, 0, 2048, 32
-- HINT: slot -> offset of its record in the last event entry it was found in (event_tiers). Kept across
-- calls (a hint, checked before use: an offset is set only after a record-aligned match, and every entry
-- has the same record layout, so a hint from another call, entry or pool is still aligned and is used only
-- where the slot's bytes are found at it); per call it was a new table grown by rehash each time. Numbers
-- only (no work for the collector's marking); emptied at HINT_MAX slots.
local HINT, HINT_N, HINT_MAX = {}, 0, 65536
local cfg, pcfg         -- knobs: cfg the pool's, then (apply_overrides) the request's effective ones; pcfg the pool's
local nsx               -- ZCARD of sx before reclamation (nil: not read); 0 means no soft entries at all
local QUIET             -- prepare found none of dead, sx, sy, orph, nd, hu (one EXISTS); nil: not checked
local N, SL, live       -- roster size, candidate -> slot, slot -> candidate (read-only: memoized with the roster)
local ndc               -- slot -> non-device blocks (nd), read by tier_split's first call
local OV                -- overlaps: slot -> {device, host, disk, event, soft} blocks (memory: Overlap)
-- Tables kept across calls so that a decision leaves less garbage (each table a call drops is later swept
-- and freed by the collector, ~0.3-1 k instructions, and Redis's forced GC step every 50th script call
-- frees up to 2,040 of them in one call: docs/REDIS.md "The Lua collector's pace"). OVT: the OV table
-- itself, emptied by reset_state; OVP: its entries, recycled (at most OVP_MAX kept); CAND, REPLY, LREC:
-- the chosen candidate's record, the 'ok' reply and the lease record, every field rewritten by each call.
local OVT, OVP, OVP_N, OVP_MAX = {}, {}, 0, 256
local CAND, REPLY, LREC = {}, {}, {}
local osc, hw, dw, pls, decay_d, rw, temp, bpf, bdf, bs   -- effective knobs (apply_overrides)
local required          -- required_blocks = ceil(isl / block_size)
local TC                -- cost_model ttft: TC[2i-1] prefill rate, TC[2i] decode coeff of candidate i (nil: default model)
local FAST              -- the decision may take choose_fast (fast_allowed)
local nexta, na         -- ARGV index of the allowed worker count, and that count
local allowed, excluded -- worker id sets (nil: none)
local seen, DEAD        -- liveness under worker_ttl_ms: the full scan's seen hash, or the fast path's dead set
local HB, HO            -- health: HB[wid] marked and skipped; HO[wid] = {until, backoff} half-open (nil: empty)
local widf              -- some filter tests the worker id (filter_reason reads rwid)
local LV, lvstamp       -- loads: LV[3i-2..3i] = candidate i's prefill tokens, decode blocks, requests
local MN, TK            -- max_num_batched_tokens / total_kv_blocks by candidate (only with a busy fraction)
local minPrefill        -- the credit decay's reference (min prefill over the eligible; unused without decay)
local UNI               -- universe(): the only candidates a pin or a short allow-list leaves (nil: all)
local chosen, shit, fast                 -- roster index (-1 none), session hit, decided by choose_fast
local CREASON           -- evaluate: CREASON[i] candidate i's filter reason ('' eligible); nil when no filter applies
local reasons, rorder   -- evaluate: reason -> count, reasons in first-seen order
local COSTS, CIDX, TIES -- evaluate: eligible costs and their candidates (softmax), or the tied minima
-- NONE: the empty value of reasons, rorder, COSTS and CIDX until a call fills them (never written: a route
-- decided by choose_fast makes none of those four tables).
local NONE = {}
local CCOST, CCRED      -- evaluate (explain, softmax): every candidate's cost and credit
local PSIZE, PG         -- explain: page size (nil: none); explain_page: the page {a, b (roster indices), min (minPrefill)}
local RELS              -- route: the request ids whose leases prepare ends (ARGV after SCAN_MAX; nil: none)
local SCAN_MAX          -- route: the full-scan bound S in ranks (ARGV [T]; 0 in every other mode)

-- SEQ_MT: SEQ[i] = the SEQ_LEN-byte hash at query position i (0-based), sliced on first use: the jump
-- search touches a few positions.
local SEQ_MT = {__index = function(t, i)
  local s = string.sub(seqs, i * SEQ_LEN + 1, i * SEQ_LEN + SEQ_LEN); t[i] = s; return s
end}
-- SEQT, ERT, SHT: the tables behind SEQ, ER and SH, kept across calls and emptied by read_request (a
-- call touches a few positions: emptying them costs less than making and growing three tables, which
-- the collector would then sweep and free). SEQT is made at the first call (the library's load-time
-- sandbox has no setmetatable).
local SEQT, ERT, SHT = nil, {}, {}
-- read_request: the request's arguments (ARGV[1..8]; apply_overrides and new_route_filter read the rest)
-- and empty memos of this call's query hashes and index entries.
local function read_request(ARGV)
  mode, now, nows, reqid, seqs = ARGV[1], tonumber(ARGV[2]), ARGV[2], ARGV[3], ARGV[4]
  isl, session, pinned, rnd = tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
  D = #seqs / SEQ_LEN
  if not SEQT then SEQT = setmetatable({}, SEQ_MT) end
  SEQT, ERT, SHT = MEMO.empty(SEQT, SEQ_MT), MEMO.empty(ERT), MEMO.empty(SHT)
  SEQ, ER, SH = SEQT, ERT, SHT
  local at = 10   -- the allowed count (after the packed overrides); the paging arguments follow the excluded ids
  local t = at + 2 + tonumber(ARGV[at]) + tonumber(ARGV[at + 1 + tonumber(ARGV[at])])
  PSIZE, PG, SCAN_MAX, RELS = nil, nil, 0, nil
  if mode == 'route' then
    SCAN_MAX = tonumber(ARGV[t] or '') or 0
    local r = tonumber(ARGV[t + 1] or '') or 0
    if r > 0 then RELS = {unpack(ARGV, t + 2, t + 1 + r)} end
  elseif mode == 'explain' then PSIZE = tonumber(ARGV[t] or '')
  elseif mode == 'explain_page' then PG = {a = tonumber(ARGV[t]), b = tonumber(ARGV[t + 1]), min = tonumber(ARGV[t + 2])} end
end
-- reset_state: every other per-call variable to its starting value.
local function reset_state()
  cfg, pcfg, nsx, QUIET, N, SL, live, ndc = nil, nil, nil, nil, nil, nil, nil, nil
  local n = 0
  for s, o in pairs(OVT) do   -- the last call's overlap entries back to the pool
    if OVP_N < OVP_MAX then OVP_N = OVP_N + 1; OVP[OVP_N] = o end
    OVT[s], n = nil, n + 1
  end
  if n > MEMO.keep then OVT = {} end   -- (as MEMO.empty: a large call's table is not kept)
  OV = OVT
  osc, hw, dw, pls, decay_d, rw, temp, bpf, bdf, bs = nil, nil, nil, nil, nil, nil, nil, nil, nil, nil
  required, TC, FAST, nexta, na, allowed, excluded = nil, nil, nil, nil, nil, nil, nil
  seen, DEAD, HB, HO, widf, LV, lvstamp, MN, TK = nil, nil, nil, nil, nil, nil, nil, nil, nil
  minPrefill, UNI, chosen, shit, fast = 0, nil, -1, false, false
  CREASON, reasons, rorder, COSTS, CIDX, TIES, CCOST, CCRED = nil, NONE, NONE, NONE, NONE, nil, nil, nil
end

-- validate_route: memory_route.go validateRoute's checks against the pool (the others are done in Go):
-- isl within [0, max_prompt_tokens], no more block hashes than isl's full blocks.
local function validate_route()
  if isl < 0 or isl > cfg.mpt or D > math.floor(isl / cfg.bs) then return {'invalid'} end
  return nil
end
-- prepare: memory_route.go prepare (validate, release expired leases, reclaim, sweep sessions), then Route's
-- lease conflict check. Returns the refusal reply, or nil.
local function prepare()
  local refusal = validate_route()
  if refusal then return refusal end
  release_expired(now, nows, RELS)
  -- Six keys that are usually absent (dead slots to reclaim, soft entries, idle sessions, orphan and
  -- non-device counts, unhealthy workers): one EXISTS instead of a probe of each. Nothing this call does
  -- before its booking (the last step) writes any of them, and release_expired, which may add idle
  -- sessions, has run, so absent here stays absent for every read below; reclaim and sweep_sessions on
  -- absent keys do nothing.
  QUIET = redis.call('EXISTS', K_DEAD, K_SX, K_SY, K_ORPH, K_ND, K_HU) == 0
  if QUIET then
    nsx = 0
  else
    nsx = redis.call('ZCARD', K_SX)
    reclaim(now, nsx > 0 and 32 or 0)
    sweep_sessions(now, cfg.sttl)
  end
  if mode == 'route' and redis.call('HEXISTS', K_LS, reqid) == 1 then return {'conflict'} end
  return nil
end

-- event_entry: memory_overlap.go eventHolders.get: the raw event entry at query position i ('' none; lib.lua
-- ENT), memoized in ER. Its bucket and field come straight from the query blob (ebucket/efield without
-- slicing the hash); the bucket number's decimal name is lib.lua's istr (memoized across calls). (ebn is
-- not written out here: the route module's function is at Lua 5.1's limit of 60 upvalues.)
local function event_entry(i)
  local s = ER[i]
  if not s then
    local o = i * SEQ_LEN
    s = redis.call('HGET', K_E .. istr(ebn(string.byte(seqs, o + SEQ_LEN - 2, o + SEQ_LEN))),
      string.sub(seqs, o + 1, o + SEQ_LEN - 1)) or ''
    ER[i] = s
  end
  return s
end
-- event_tiers: eventHolders.contains, giving the tiers of slot's record at position i (nil: none held). The
-- slot is looked up where its record was in the last entry it was found in (HINT: holders of one chain
-- keep their record order from position to position), else with string.find on its packed bytes (SK: memo)
-- accepting only matches aligned to a record, so no probe parses the other holders' records. A slot has at
-- most one record, so any aligned match is it. Returns a value that is truthy exactly when held: the jump
-- search's contains.
local function event_tiers(i, slot)
  local s = ER[i] or event_entry(i)
  local n = #s
  if n < E_FIRST + E_REC - 1 then return nil end
  local lo = slot % SK_PAGE
  local page = SK[slot - lo]
  local key = page and page[lo + 1]
  if not key then
    key = struct.pack(ENT.SLOT_FMT, slot)
    if not page then
      if SK_N >= SK_MAX then SK, SK_N = {}, 0 end
      page = {}
      SK[slot - lo], SK_N = page, SK_N + 1
    end
    page[lo + 1] = key
  end
  local p = HINT[slot]
  if not (p and p + E_REC - 1 <= n and string.find(s, key, p, true) == p) then   -- (find, not sub: no new string)
    local from = E_FIRST
    while true do
      p = string.find(s, key, from, true)
      if not p then return nil end
      if (p - E_FIRST) % E_REC == 0 then break end
      from = p + 1
    end
    if HINT[slot] == nil then
      if HINT_N >= HINT_MAX then HINT, HINT_N = {}, 0 end
      HINT_N = HINT_N + 1
    end
    HINT[slot] = p
  end
  local t = string.byte(s, p + E_TIER_BYTE) % E_TIERS
  if t ~= 0 then return t end
  return nil
end
-- soft_entry: memory_overlap.go softHolders' entry at position i, parsed: {slot -> expiry ms} (memo SH).
local function soft_entry(i)
  local h = SH[i]
  if h then return h end
  h = {}
  local s = redis.call('HGET', sbucket(SEQ[i]), SEQ[i])
  if s then
    for off = 1, #s, SOFT.REC do
      local slot, exp = struct.unpack(SOFT.FMT, s, off)
      h[slot] = exp
    end
  end
  SH[i] = h
  return h
end
-- soft_contains: softHolders.contains (an entry counts until its expiry).
local function soft_contains(i, s) local e = soft_entry(i)[s]; return e ~= nil and e > now end

-- jump_depths: memory_overlap.go jumpDepths, the same search (windows of 32, 64, 128, … positions, ending at
-- 32, 96, 224, 480, …; same binary search): depth[s] = the prefix length holder s holds, for the holders
-- active of position 0 (filtered in place, as Go's keep := active[:0]: no table per window, no ipairs).
local function jump_depths(active, contains, d, depth)
  local n = #active
  if d == 0 or n == 0 then return end
  local lo, step = 0, 32
  while n > 0 and lo < d - 1 do
    local hi = lo + step
    if hi > d - 1 then hi = d - 1 end
    local kept = 0
    for k = 1, n do
      local s = active[k]
      if contains(hi, s) then
        kept = kept + 1
        active[kept] = s
      else
        local l, r = lo, hi
        while r - l > 1 do
          local m = math.floor((l + r) / 2)
          if contains(m, s) then l = m else r = m end
        end
        depth[s] = l + 1
      end
    end
    for k = kept + 1, n do active[k] = nil end
    n = kept
    lo = hi
    step = step * 2   -- O(log D) windows (Go: the same)
  end
  for k = 1, n do depth[active[k]] = lo + 1 end
end
-- linear_depth: memory_overlap.go linearDepth, for a slot holding orphans (its chain need not be
-- prefix-closed): block by block.
local function linear_depth(s)
  local d = 0
  while d < D and event_tiers(d, s) do d = d + 1 end
  return d
end
-- tier_split: memory_overlap.go tierSplit: the device/host/disk split of slot s's d blocks (only slots
-- with non-device blocks, nd, are walked; nd is read on the first call).
local function tier_split(s, d)
  if not ndc then
    ndc = {}
    local kv = QUIET and NONE or redis.call('HGETALL', K_ND)
    for i = 1, #kv, 2 do ndc[tonumber(kv[i])] = tonumber(kv[i + 1]) end
  end
  local dev, host, disk = d, 0, 0
  if ndc[s] then
    dev = 0
    for i = 0, d - 1 do
      local t = event_tiers(i, s)
      if bit.band(t, 1) ~= 0 then dev = dev + 1 elseif bit.band(t, 2) ~= 0 then host = host + 1 else disk = disk + 1 end
    end
  end
  return dev, host, disk
end
-- wanted: slot s is a live rank whose overlap this call computes (explain_page: its page's ranks only;
-- a rank's depth does not depend on the other holders', so a page's are the full computation's).
local function wanted(s)
  local i = live[s]
  return i ~= nil and (not PG or (i >= PG.a and i <= PG.b))
end
-- overlaps: memory_route.go overlaps: every live rank's overlap (OV), the event layer (jump search over
-- position 0's holders, orphan holders block by block, then the tier split) and the soft layer (skipped
-- when sx was empty before reclamation or is now).
-- ov_entry: an overlap entry table, from the pool (OVP) when it holds one; the caller sets all five fields.
local function ov_entry()
  if OVP_N == 0 then return {0, 0, 0, 0, 0} end
  local o = OVP[OVP_N]
  OVP[OVP_N], OVP_N = nil, OVP_N - 1
  return o
end
local function overlaps()
  local ev = {}
  if D > 0 and N > 0 then
    local orph = {}
    local kv = QUIET and NONE or redis.call('HGETALL', K_ORPH)
    for i = 1, #kv, 2 do if tonumber(kv[i + 1]) > 0 then orph[tonumber(kv[i])] = true end end
    local at0 = {}
    local s0 = event_entry(0)
    for off = E_FIRST, #s0 - E_REC + 1, E_REC do
      local s, w = struct.unpack(ENT.FMT, s0, off)
      if w % E_TIERS ~= 0 and wanted(s) and not orph[s] then at0[#at0 + 1] = s end
    end
    jump_depths(at0, event_tiers, D, ev)
    for s in pairs(orph) do
      if wanted(s) then
        local d = linear_depth(s)
        if d > 0 then ev[s] = d end
      end
    end
  end
  for s, d in pairs(ev) do
    local dev, host, disk = tier_split(s, d)
    local o = ov_entry()   -- an overlap entry (see effective)
    o[1], o[2], o[3], o[4], o[5] = dev, host, disk, d, 0
    OV[s] = o
  end
  if D > 0 and nsx ~= 0 and redis.call('ZCARD', K_SX) > 0 then
    local soft = {}
    local at0 = {}
    for s, exp in pairs(soft_entry(0)) do
      if exp > now and wanted(s) then at0[#at0 + 1] = s end
    end
    jump_depths(at0, soft_contains, D, soft)
    for s, d in pairs(soft) do
      local o = OV[s]
      if not o then
        o = ov_entry()
        o[1], o[2], o[3], o[4] = 0, 0, 0, 0
        OV[s] = o
      end
      o[5] = d   -- soft
    end
  end
end
-- An overlap entry (OV[slot], memory: Overlap) is the array {device, host, disk, event, soft} blocks, by
-- position: overlaps builds one per holder on every route, and an array constructor costs less than a
-- five-field hash table. overlaps writes it, effective and explain_rows read it; nothing else indexes it.
-- effective: types.go Overlap.Effective: soft blocks beyond the event depth count as device blocks.
-- Returns device, host, disk, depth (all 0 for nil: no overlap).
local function effective(o)
  if not o then return 0, 0, 0, 0 end
  local dev, event, soft = o[1], o[4], o[5]
  if soft > event then return dev + soft - event, o[2], o[3], soft end
  return dev, o[2], o[3], event
end
-- scores: memory_route.go Memory.Overlap: the 'scores' reply, candidates with a non-zero depth in roster
-- order.
local function scores()
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

-- apply_overrides: knobs.go Overrides.Apply: from here on cfg holds the effective knobs, pcfg the pool's.
local function apply_overrides(ARGV)
  pcfg = cfg
  cfg, nexta = cfg_override(cfg, ARGV, 9)
  osc, hw, dw, pls = cfg.osc, cfg.hw, cfg.dw, cfg.pls
  decay_d, rw, temp, bpf, bdf = cfg.decay, cfg.rw, cfg.temp, cfg.bpf, cfg.bdf
  bs = cfg.bs
  required = math.floor((isl + bs - 1) / bs)
  TC = (cfg.cm == 1 and mode ~= 'query') and TT.coeffs(cfg, N, PG and PG.a, PG and PG.b) or nil
end
-- safe_knob: memory_select.go safeKnob (statestore.MaxKnob = 1e9).
local function safe_knob(v) return v == 0 or (v >= 1e-200 and v <= 1e9) end
-- fast_allowed: memory_select.go chooseFast's opening test: a routing decision with temperature 0, scored
-- with the pool's own prefill_load_scale and decode_active_request_weight (lz is ordered by them) within
-- safeKnob's range. cost_model ttft never takes it: per-rank coefficients make a cost depend on more than
-- the load (memory: chooseFast returns nil too). Not in memory: a route over at most SCAN_MAX ranks takes the
-- full scan, which decides the same and costs Redis less there (the memory store has no such cost); so does
-- a pool that does not keep its load orders (lib.lua "Load orders only where a route may walk": one of at
-- most the put_worker's S ranks since it was created).
local function fast_allowed()
  return (mode == 'route' or mode == 'head') and temp <= 0 and N > 0 and N > SCAN_MAX and not TC and LZ.kept()
    and pls == pcfg.pls and rw == pcfg.rw and safe_knob(pls) and safe_knob(rw)
end
-- new_route_filter: memory_route.go newRouteFilter (allowed, excluded) plus what memPool.live and the
-- health test read. Liveness under worker_ttl_ms (live iff now < last seen + ttl): the full scan reads the
-- whole seen hash; the fast path only the dead workers, the head of sz up to now − ttl (DEAD, O(dead)).
-- Health (hu): HB marked and skipped (in the back-off window, or probed by another decision), HO half-open
-- (the decision that books it takes the probe).
local function new_route_filter(ARGV)
  na = tonumber(ARGV[nexta])
  if na > 0 then
    allowed = {}
    for i = 1, na do allowed[ARGV[nexta + i]] = true end
  end
  if cfg.wttl > 0 then
    if FAST then
      DEAD = {}
      for _, wid in ipairs(redis.call('ZRANGEBYSCORE', K_SZ, '-inf', num(now - cfg.wttl))) do DEAD[wid] = true end
    elseif PG then   -- a page: its workers' entries only (a multi-rank worker's id repeats: harmless)
      seen = {}
      local ids = {}
      for i = PG.a, PG.b do ids[#ids + 1] = rwid(i) end
      local got = #ids > 0 and redis.call('HMGET', K_SEEN, unpack(ids)) or {}
      for k, wid in ipairs(ids) do seen[wid] = tonumber(got[k]) end
    else
      seen = {}
      local kv = redis.call('HGETALL', K_SEEN)
      for i = 1, #kv, 2 do seen[kv[i]] = tonumber(kv[i + 1]) end
    end
  end
  local nx = tonumber(ARGV[nexta + 1 + na])
  if nx > 0 then
    excluded = {}
    for i = 1, nx do excluded[ARGV[nexta + 1 + na + i]] = true end
  end
  if cfg.ua > 0 then
    local kv = QUIET and NONE or redis.call('HGETALL', K_HU)
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
  widf = allowed or pinned ~= '' or cfg.wttl > 0 or excluded or HB
end
-- is_live: memory.go memPool.live.
local function is_live(wid)
  if cfg.wttl == 0 then return true end
  if DEAD then return not DEAD[wid] end
  return now < (seen[wid] or 0) + cfg.wttl
end

-- Loads. The full scan reads the whole column (full_loads: one GET per chunk, or the memo kept across
-- calls under the loads stamp, lv_touch in lib.lua; this call's own releases are already applied to it);
-- the fast path reads a candidate's loads on first use only, into the partial memo kept across calls
-- (lib.lua lv_partial: one GET per loads chunk touched, none for candidates already in it; a column of
-- this call's own when the pool has no loads stamp yet). Read-only until book.
local function full_loads()
  if N > 0 then
    local lvs, exact = lv_all()
    if #lvs == 24 * N then
      LV = bulk_unpack(lvs, 1, N, 'ddd', 3, 0)
      if lvstamp and exact then lv_memo_put(lvstamp, LV, N) end
      return
    end
  end
  LV = {}
  for j = 1, 3 * N do LV[j] = 0 end
end
-- page_loads: an explain page's loads, candidates PG.a..PG.b only: one GETRANGE per loads chunk it
-- touches, unpacked in bulk (a missing or short chunk reads as zero loads, as lv_all).
local function page_loads()
  LV = {}
  local R, i = ros(), PG.a
  while i <= PG.b do
    local c, j = rloc(i)
    local k = math.min(R.cn[c] - j + 1, PG.b - i + 1)   -- the page's candidates in chunk c
    local s = redis.call('GETRANGE', lv_ckey(c), istr((j - 1) * 24), istr((j - 1 + k) * 24 - 1))
    local v = #s == 24 * k and bulk_unpack(s, 1, k, 'ddd', 3, 0) or nil
    for t = 1, 3 * k do LV[3 * (i - 1) + t] = v and v[t] or 0 end
    i = i + k
  end
end
-- lazy_field: a candidate record's f64 field at offset off (ROFF), read on first use.
local function lazy_field(off)
  return setmetatable({}, {__index = function(t, i) local v = rnum(i, off); t[i] = v; return v end})
end
-- read_loads: LV (the loads memo when fresh), and MN/TK, whole columns for the full scan, one record field
-- on first use for the fast path and an explain page.
local function read_loads()
  local e
  e, lvstamp = lv_memo_get(N)
  LV = e and e.full and e.m
  if not LV then
    if PG then page_loads()
    elseif FAST then LV = lv_partial(e, lvstamp, N)
    else full_loads() end
  end
  if FAST or PG then
    MN = (bpf > 0) and lazy_field(ROFF.MNBT) or nil
    TK = (bdf > 0) and lazy_field(ROFF.TKV) or nil
  else
    MN = (bpf > 0) and rcol(ROFF.MNBT, 'd', 8) or nil
    TK = (bdf > 0) and rcol(ROFF.TKV, 'd', 8) or nil
  end
end

-- filter_reason: memory_route.go filterReason: candidate i's filter reason ('' eligible), in its order.
local function filter_reason(i)
  if widf then
    local wid = rwid(i)
    if not is_live(wid) then return R_NOT_LIVE
    elseif allowed and not allowed[wid] then return R_NOT_ALLOWED
    elseif pinned ~= '' and wid ~= pinned then return R_NOT_PINNED
    elseif excluded and excluded[wid] then return R_EXCLUDED
    elseif HB and HB[wid] then return R_UNHEALTHY
    end
  end
  if MN and MN[i] > 0 and LV[3 * i - 2] > bpf * MN[i] then return R_BUSY_PREFILL end
  if TK and TK[i] > 0 and LV[3 * i - 1] > bdf * TK[i] then return R_BUSY_DECODE end
  return ''
end
-- cost_of: selection.go Cost (cost_model ttft: ttft_route.go TTFTCandidate, credit 0): candidate i's cost
-- and credit, same operation order (same IEEE double results).
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
-- worker_ranks calls f on the roster index of each registered rank of worker wid (none: unknown).
local function worker_ranks(wid, f)
  local wp = redis.call('HGET', K_WK, wid)
  if not wp then return end
  local w = cmsgpack.unpack(wp)
  for r = 1, w[W.DP] do
    local i = live[w[W.SLOTS][r]]
    if i then f(i, w[W.RIDS][r]) end
  end
end
-- universe: memory_select.go universe: a pinned worker's or an allow-list of at most UNIVERSE_MAX workers'
-- ranks in roster order (every other rank is filtered 'not_pinned'/'not_allowed'), else nil.
local UNIVERSE_MAX = 64
local function universe(ARGV)
  if not (pinned ~= '' or (na > 0 and na <= UNIVERSE_MAX)) then return nil end
  local U, done = {}, {}
  for _, id in ipairs(pinned ~= '' and {pinned} or {unpack(ARGV, nexta + 1, nexta + na)}) do
    if not done[id] then
      done[id] = true
      worker_ranks(id, function(i) U[#U + 1] = i end)
    end
  end
  table.sort(U)
  return U
end
-- min_eligible_prefill: memory_select.go minEligiblePrefill, the fast path's credit decay reference: over
-- UNI, or the first eligible candidate of lp (candidates by prefill tokens; O(ranks filtered ahead of it)).
-- 0 when none is eligible.
local function min_eligible_prefill()
  local m = 0
  if UNI then
    local any = false
    for _, i in ipairs(UNI) do
      if filter_reason(i) == '' and (not any or LV[3 * i - 2] < m) then m, any = LV[3 * i - 2], true end
    end
    return m
  end
  local from = 0
  while true do
    local page = redis.call('ZRANGE', K_LP, istr(from), istr(from + 15))
    if #page == 0 then break end
    for _, ck in ipairs(page) do
      local i = live[LZ.slot(ck)]
      if i and filter_reason(i) == '' then return LV[3 * i - 2] end
    end
    from = from + 16
  end
  return m
end
-- bound_rank: memory_route.go boundRank: the roster index of the rank a live session binding names when
-- it is eligible (-1: none), found through its worker's record (O(dp)); a binding whose worker is dead or
-- removed, or that expired, is deleted.
local function bound_rank()
  if not (cfg.sttl > 0 and session ~= '') then return -1 end
  local sp = redis.call('HGET', K_SS, session)
  if not sp then return -1 end
  local s = cmsgpack.unpack(sp)
  local ri = nil
  worker_ranks(s[S.WID], function(i, rid) if rid == s[S.RID] then ri = i end end)
  if not ri or not is_live(rwid(ri)) or (s[S.ACTIVE] == 0 and now >= s[S.IDLE] + cfg.sttl) then
    redis.call('HDEL', K_SS, session)
    redis.call('ZREM', K_SY, session)
    return -1
  end
  if filter_reason(ri) == '' then return ri end
  return -1
end

-- pick_tie: selection.go Pick's temperature-0 rule, the floor(r·k)-th (0-based, clamped) of k tied
-- candidates.
local function pick_tie(k)
  local want = math.floor(rnd * k)
  if want >= k then want = k - 1 end
  return want
end
-- choose_fast: memory_select.go chooseFast, the decision of the full scan (evaluate) without visiting every
-- candidate (its comment proves the walk exact; the same constant SLACK = s = 1 − 2^-40 and bound
-- lb(K) = (K·s + cLo)·s). Returns the chosen roster index, or nil: the full scan decides (nothing eligible,
-- so its reasons are needed; or lz disagrees with itself, which never happens when lv_set keeps it).
--   - a pinned worker or an allow-list of at most UNIVERSE_MAX workers: just their ranks, the full scan's
--     rules (every other rank is filtered 'not_pinned'/'not_allowed');
--   - otherwise the holders (OV, found through the index) are costed exactly with cost_of, then lz is read
--     from its head one load group at a time (ZRANGE by rank: the first member gives the load; group_size
--     the size; the next group starts size ranks on) until lb of a group's key exceeds the least cost m so far;
--   - a group's eligible members are counted from its size when the filter's rejections can be listed
--     (no allow-list: holders, excluded, health-marked and dead workers' ranks, SKIP) and its load is not
--     busy-testable (no busy fraction, or a zero load); otherwise every member is tested (exact, linear in
--     the members of the groups read);
--   - pick_tied picks among the ties.
local SLACK, EXPAND_MAX = 1 - 2 ^ -40, 64
-- pick_tied: memory_select.go pickTied: the floor(r·k)-th of the k tied candidates in candidate order (=
-- roster order): tied holders TH and listed members (E) merged with the counted groups (C) by order
-- statistics over each group's contiguous rank range (ZRANGE lz i i; skipped members' ranks by ZRANK): a
-- direct index with one group, a merge with one group and listed candidates, binary searches with several
-- (fetched and sorted instead when at most EXPAND_MAX are tied). G: the tied groups, SKIP: load -> roster
-- indices a group count leaves out.
local function pick_tied(TH, G, SKIP)
  local E, C, k = {}, {}, #TH
  for _, i in ipairs(TH) do E[#E + 1] = i end
  for _, g in ipairs(G) do
    k = k + g.k
    if g.list then for _, i in ipairs(g.list) do E[#E + 1] = i end
    else C[#C + 1] = g end
  end
  local want = pick_tie(k)
  if #C == 0 or (#C > 1 and k <= EXPAND_MAX) then   -- no counted group, or few ties: fetch every one
    for _, g in ipairs(C) do
      local skip = {}
      for _, i in ipairs(SKIP[g.l] or NONE) do skip[i] = true end
      for _, x in ipairs(redis.call('ZRANGE', K_LZ, istr(g.a), istr(g.a + g.n - 1))) do
        local i = live[LZ.slot(x)]
        if not i then return nil end
        if not skip[i] then E[#E + 1] = i end
      end
    end
    table.sort(E)
    return E[want + 1]
  end
  table.sort(E)
  for _, g in ipairs(C) do   -- g.at: the lz ranks of its skipped members, sorted
    g.at = {}
    for _, i in ipairs(SKIP[g.l] or NONE) do
      local z = redis.call('ZRANK', K_LZ, g.l .. LZ.rck(i))
      if not z then return nil end
      g.at[#g.at + 1] = z
    end
    table.sort(g.at)
  end
  local function at(z) return live[LZ.slot(redis.call('ZRANGE', K_LZ, istr(z), istr(z))[1])] end
  -- member: g's t-th (0-based) eligible member; less_in: g's eligible members before roster index x.
  local function member(g, t)
    local z = g.a + t
    for _, s in ipairs(g.at) do if s <= z then z = z + 1 else break end end
    return at(z)
  end
  local function less_in(g, x)
    local lo, hi = g.a, g.a + g.n
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if at(mid) < x then lo = mid + 1 else hi = mid end
    end
    local c = lo - g.a
    for _, s in ipairs(g.at) do if s < lo then c = c - 1 else break end end
    return c
  end
  if #C == 1 then   -- merge E into the one group: E[q] is tied candidate less_in + q - 1
    local g, placed = C[1], 0
    for q, e in ipairs(E) do
      local pq = less_in(g, e) + q - 1
      if pq == want then return e end
      if pq > want then break end
      placed = q
    end
    return member(g, want - placed)
  end
  local function before(x)   -- tied candidates before roster index x
    local lo, hi = 1, #E + 1
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if E[mid] < x then lo = mid + 1 else hi = mid end
    end
    local b = lo - 1
    for _, g in ipairs(C) do b = b + less_in(g, x) end
    return b
  end
  local function find(n, get)   -- the source's candidate with exactly want candidates before it
    local lo, hi = 0, n - 1
    while lo <= hi do
      local mid = math.floor((lo + hi) / 2)
      local x = get(mid)
      local b = before(x)
      if b == want then return x elseif b < want then lo = mid + 1 else hi = mid - 1 end
    end
    return nil
  end
  local x = find(#E, function(t) return E[t + 1] end)
  for _, g in ipairs(C) do
    if x then break end
    x = find(g.k, function(t) return member(g, t) end)
  end
  return x
end
-- group_size: the size of the load group (the members of load bytes l) that starts at lz rank pos, with no
-- count kept per load (layouts 3-4 kept one in lc, written on every booking and release): members of one
-- score sort by their bytes, load first, so the group is the run of l-prefixed members from pos within the
-- run of its score sc, ranks z0..z0 + ZCOUNT(sc) − 1. One ZCOUNT, and when that run ends after pos one
-- ZRANGE of its last member, which holds l unless loads of other bytes share the score (scores collide,
-- e.g. decode_active_request_weight 0 ignores the request count); then a binary search over the run
-- (O(log W) ZRANGEs). nil: lz disagrees with itself (z0 not the run's start), the full scan decides.
-- Complexity: O(log W) per call, O(log² W) with colliding scores.
local function group_size(pos, l, sc, z0)
  local last = z0 + redis.call('ZCOUNT', K_LZ, sc, sc) - 1
  if last < pos then return nil end
  if last == pos then return 1 end
  local function holds(z) return string.sub(redis.call('ZRANGE', K_LZ, istr(z), istr(z))[1] or '', 1, 24) == l end
  if holds(last) then return last - pos + 1 end
  local lo, hi = pos, last   -- holds(lo), not holds(hi)
  while hi - lo > 1 do
    local mid = math.floor((lo + hi) / 2)
    if holds(mid) then lo = mid else hi = mid end
  end
  return lo - pos + 1
end
local function choose_fast()
  if UNI then
    local best, ties = nil, {}
    for _, i in ipairs(UNI) do
      if filter_reason(i) == '' then
        local c = cost_of(i)
        if not best or c < best then best, ties = c, {i}
        elseif c == best then ties[#ties + 1] = i end
      end
    end
    if not best then return nil end
    return ties[pick_tie(#ties) + 1]
  end
  local m, found, TH = 0, false, {}   -- least cost so far, whether any, tied holders
  for s in pairs(OV) do
    local i = live[s]
    if filter_reason(i) == '' then
      local c = cost_of(i)
      if not found or c < m then m, found, TH = c, true, {i}
      elseif c == m then TH[#TH + 1] = i end
    end
  end
  local listable = allowed == nil
  local SKIP = {}   -- listable: load (24 bytes) -> roster indices a group count leaves out
  if listable then
    local sk = {}
    for s in pairs(OV) do sk[live[s]] = true end
    local function add(i) sk[i] = true end
    for wid in pairs(excluded or NONE) do worker_ranks(wid, add) end
    for wid in pairs(HB or NONE) do worker_ranks(wid, add) end
    for wid in pairs(DEAD or NONE) do worker_ranks(wid, add) end
    for i in pairs(sk) do
      local l = struct.pack('>ddd', LV[3 * i - 2], LV[3 * i - 1], LV[3 * i])   -- lv's bytes, re-packed
      SKIP[l] = SKIP[l] or {}
      table.insert(SKIP[l], i)
    end
  end
  local cLo = (pls * (isl / bs) + required) * SLACK
  local G = {}   -- tied groups {a = first lz rank, n = size, l = load, k = eligible, list = eligible (not counted)}
  local pos, prev, zs, z0 = 0, nil, nil, 0   -- zs: the score (as Redis wrote it) of the run at ranks z0..
  while true do
    local got = redis.call('ZRANGE', K_LZ, istr(pos), istr(pos), 'WITHSCORES')
    local mem, sc = got[1], got[2]
    if not mem then break end
    local l = string.sub(mem, 1, 24)
    if l == prev then return nil end   -- not a group boundary: lz disagrees with the sizes read
    prev = l
    if sc ~= zs then zs, z0 = sc, pos end
    local p, d, r = struct.unpack('>ddd', l)
    if found and ((pls * (p / bs) + d + rw * r) * SLACK + cLo) * SLACK > m then break end
    local n = group_size(pos, l, sc, z0)
    if not n then return nil end
    local prefill = (p + isl) / bs   -- cost_of's no-overlap arithmetic, same operations
    if prefill < 0 then prefill = 0 end
    local cost = pls * prefill + (d + required) + rw * r
    if not found or cost <= m then
      local g = {a = pos, n = n, l = l}
      if listable and (bpf == 0 or p == 0) and (bdf == 0 or d == 0) then
        g.k = n - #(SKIP[l] or NONE)
      else
        g.list = {}
        for _, x in ipairs(redis.call('ZRANGE', K_LZ, istr(pos), istr(pos + n - 1))) do
          local i = live[LZ.slot(x)]
          if not i then return nil end
          if not OV[SL[i]] and filter_reason(i) == '' then g.list[#g.list + 1] = i end
        end
        g.k = #g.list
      end
      if g.k > 0 then
        if not found or cost < m then m, found, TH, G = cost, true, {}, {g}
        else G[#G + 1] = g end
      end
    end
    pos = pos + n
  end
  if not found then return nil end
  return pick_tied(TH, G, SKIP)
end

-- fexp: selection.go Exp, Go's portable exp, operation by operation.
local function fexp(x)
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
-- pick: selection.go Pick: the 1-based index of the chosen cost among cs (temperature T, random r).
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
-- count_reason counts one candidate filtered for reason (reasons, rorder: first-seen order).
local function count_reason(reason)
  if reasons == NONE then reasons, rorder = {}, {} end
  if not reasons[reason] then reasons[reason] = 0; rorder[#rorder + 1] = reason end
  reasons[reason] = reasons[reason] + 1
end
-- evaluate: memory_route.go evaluateOver over the whole roster (the full scan), for what choose_fast does
-- not decide: every candidate's filter reason (reasons, rorder, CREASON) and the credit decay's minPrefill,
-- the eligible costs, then pick unless a session binding chose c already. Returns the chosen roster index
-- (-1: nothing eligible).
--   - with temperature <= 0 (and not explaining) one pass keeps only the minimum and its ties in roster
--     order (TIES), which is all pick's rule floor(r·k) reads; a candidate holding none of the prompt costs
--     cost_of's no-overlap arithmetic, inlined (same operations in the same order: credit is +0 there and
--     never subtracted), so the per-candidate work of the common case is a few table reads and no call;
--   - otherwise every eligible cost goes to COSTS/CIDX for the softmax (and CCOST/CCRED keep every
--     candidate's terms for explain).
local function evaluate(c)
  COSTS, CIDX = {}, {}
  if getmetatable(LV) then full_loads() end
  if getmetatable(MN) then MN = rcol(ROFF.MNBT, 'd', 8) end
  if getmetatable(TK) then TK = rcol(ROFF.TKV, 'd', 8) end
  local lv = LV
  local anyEligible = false
  if not widf and not MN and not TK then
    -- minPrefill feeds only the credit decay: skip the pass without it.
    for i = 1, decay_d > 0 and N or 0 do
      local p = lv[3 * i - 2]
      if not anyEligible or p < minPrefill then minPrefill, anyEligible = p, true end
    end
  else CREASON = {} end
  for i = 1, CREASON and N or 0 do
    local reason = filter_reason(i)
    if reason ~= '' then count_reason(reason)
    elseif not anyEligible or lv[3 * i - 2] < minPrefill then
      minPrefill, anyEligible = lv[3 * i - 2], true
    end
    CREASON[i] = reason
  end
  if mode == 'explain' or temp > 0 then
    CCOST, CCRED = {}, {}
    local nc = 0
    for i = 1, N do
      local cost, credit = cost_of(i)
      CCOST[i], CCRED[i] = cost, credit
      if not CREASON or CREASON[i] == '' then nc = nc + 1; COSTS[nc] = cost; CIDX[nc] = i end
    end
  elseif c < 0 then
    local creason, ov, sl, tc = CREASON, OV, SL, TC
    local q, b, pl, w = isl, bs, pls, rw
    local ties, cmin = {}, nil
    for i = 1, N do
      if not creason or creason[i] == '' then
        local cost
        if tc or ov[sl[i]] then cost = cost_of(i)
        else
          local j = 3 * i
          local prefill = (lv[j - 2] + q) / b
          if prefill < 0 then prefill = 0 end
          cost = pl * prefill + (lv[j - 1] + required) + w * lv[j]
        end
        if not cmin or cost < cmin then cmin = cost; ties = {i}
        elseif cost == cmin then ties[#ties + 1] = i end
      end
    end
    TIES = ties
  end
  if c < 0 then
    if TIES then
      -- pick's temperature-0 rule on the ties alone: the floor(r·k)-th of the k minima (clamped).
      if #TIES > 0 then c = TIES[pick_tie(#TIES) + 1] end
    elseif #COSTS > 0 then
      c = CIDX[pick(COSTS, temp, rnd)]
    end
  end
  return c
end

local function f17(x) return string.format('%.17g', x) end
-- explain_rows: candidates a..b of the explanation (memory_route.go Memory.Explain's Candidate fields), from
-- the terms evaluate or explain_page left in CREASON/CCOST/CCRED, packed into one string (statestore
-- decodeCandidates): per candidate the fixed part ROW_FMT = dp rank, device, host, disk, event, soft and
-- overlap blocks (u32 each), credit, prefill tokens, decode blocks, requests, cost (f64 each: the exact
-- doubles, no text conversion), the lengths of worker id, url (u16 each) and filter reason (u8), a u8 1
-- when cost_model ttft coefficients follow; then the worker id, url and reason bytes; then (ttft) prefill
-- rate and decode coeff (f64 each). No nested reply table per candidate: ~3× less Redis CPU per
-- candidate than one 15-value array each with %.17g strings. Also the reason counts (rs) in first-seen
-- order.
local ROW_FMT = '>I4I4I4I4I4I4I4dddddI2I2BB'
local function explain_rows(a, b)
  local rs = {}
  for _, k in ipairs(rorder) do rs[#rs + 1] = k; rs[#rs + 1] = reasons[k] end
  local parts, n = {}, 0
  local tc = TC and 1 or 0
  for i = a, b do
    local o = OV[SL[i]]
    local dev, host, disk, depth = effective(o)
    local event, soft = 0, 0
    if o then event, soft = o[4], o[5] end   -- an overlap entry (see effective)
    local _, _, rank, _, _, _, wid, url = rrec(i)
    local reason = CREASON and CREASON[i] or ''
    parts[n + 1] = struct.pack(ROW_FMT, rank, dev, host, disk, event, soft, depth, CCRED[i], LV[3 * i - 2], LV[3 * i - 1],
      LV[3 * i], CCOST[i], #wid, #url, #reason, tc)
    parts[n + 2], parts[n + 3], parts[n + 4] = wid, url, reason
    n = n + 4
    if TC then n = n + 1; parts[n] = struct.pack('>dd', TC[2 * i - 1], TC[2 * i]) end
  end
  return rs, table.concat(parts)
end
-- explain: memory_route.go Memory.Explain: the 'explain' reply, every candidate's terms (one call).
local function explain()
  local rs, cl = explain_rows(1, N)
  return {'explain', required, chosen - 1 >= 0 and chosen - 1 or -1, shit and 1 or 0, rs, cl}
end
local function roster_stamp() return redis.call('HGET', K_SC, 'rv') or '' end
-- explain_head: a paged explain's first call, the decision route would make (chosen, session hit) and
-- what every page shares: the roster stamp and size, required blocks, the credit decay's reference.
local function explain_head()
  return {'head', roster_stamp(), N, required, chosen - 1 >= 0 and chosen - 1 or -1, shit and 1 or 0, f17(minPrefill), fast and 1 or 0}
end
-- explain_page: candidates PG.a..PG.b: evaluate's loop over the page (filter reason, counted; cost and
-- credit against the head's minPrefill), every candidate's terms as explain reports them.
local function explain_page()
  CREASON, CCOST, CCRED, minPrefill = {}, {}, {}, PG.min
  for i = PG.a, PG.b do
    local reason = filter_reason(i)
    if reason ~= '' then count_reason(reason) end
    CREASON[i] = reason
    CCOST[i], CCRED[i] = cost_of(i)
  end
  local rs, cl = explain_rows(PG.a, PG.b)
  return {'page', roster_stamp(), N, rs, cl}
end
-- no_eligible: NoEligibleError's reply, the filter reasons in first-seen order.
local function no_eligible()
  local out = {'noelig'}
  for _, k in ipairs(rorder) do out[#out + 1] = k; out[#out + 1] = reasons[k] end
  return out
end

-- candidate: the chosen rank's record (rrec) by name.
local function candidate(i)
  local slot, rid, rank, _, _, kve, wid, url = rrec(i)
  CAND.slot, CAND.rid, CAND.rank, CAND.kve, CAND.wid, CAND.url = slot, rid, rank, kve, wid, url
  return CAND
end
-- decision: memory_route.go evaluation.decision: the 'ok' reply for candidate i (record c), taken before
-- book changes its loads (its cost reads them; LV may be the memo).
local function decision(i, c)
  local _, _, _, depth = effective(OV[c.slot])
  local r = REPLY
  r[1], r[2], r[3], r[4], r[5], r[6] = 'ok', c.wid, c.rank, c.url, depth, required
  r[7], r[8], r[9] = f17(cost_of(i)), shit and 1 or 0, fast and 1 or 0
  return r
end
-- put_soft: memory_route.go book's soft.put loop: the chosen slot's soft entry (expiry sexp) at every
-- query position, last position first: a position with no soft entry yet costs one HSETNX; the first one
-- that exists switches the rest (the prompt's earlier, more shared blocks) to read-modify-write. The sweep
-- order is one ZADD per 512 members.
local function put_soft(slot, sexp)
  local key4 = struct.pack(SOFT.SLOT_FMT, slot)
  local rec = key4 .. struct.pack(SOFT.EXP_FMT, sexp)
  local rl, kl = SOFT.REC, SOFT.SLOT_LEN
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
        for off = 1, #s, rl do
          if string.sub(s, off, off + kl - 1) == key4 then parts[#parts + 1] = rec; found = true
          else parts[#parts + 1] = string.sub(s, off, off + rl - 1) end
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
-- book: memory_route.go book: the load and the lease, the half-open worker's probe, the session binding,
-- the approximate/predicted (soft) entries.
local function book(i, c)
  local dev = effective(OV[c.slot])
  local booked = isl - dev * bs
  if booked < 0 then booked = 0 end
  local ck = LZ.ck(c.wid, c.rank, c.slot)
  local p, d, r = LV[3 * i - 2], LV[3 * i - 1], LV[3 * i]   -- before booking: ttft's features x1, x2
  lv_set(i, p + booked, d + required, r + 1, nil, ck)
  if HO and HO[c.wid] then
    local h = HO[c.wid]
    redis.call('HSET', K_HU, c.wid, struct.pack('>ddd', h[1], now + h[2], h[2]))
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
        s = {c.rid, c.wid, g, 0, 0}   -- S_* order: rank id, worker id, generation, active, idle since
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
  local lrec = LREC   -- L_* order
  lrec[1], lrec[2], lrec[3], lrec[4], lrec[5], lrec[6], lrec[7], lrec[8] = c.rid, booked, required, expiry, lsess, lgen, i, ck
  if TC then lrec[L.X1], lrec[L.X2], lrec[L.T] = p + booked, d, now else lrec[L.X1], lrec[L.X2], lrec[L.T] = nil, nil, nil end
  redis.call('HSET', K_LS, reqid, cmsgpack.pack(lrec))
  redis.call('ZADD', K_LX, num(expiry), reqid)
  lx_added(expiry)
  local ttl = cfg.pttl
  local kve = c.kve
  if kve < 0 then kve = cfg.kve end
  if kve == 0 then ttl = cfg.attl end
  if ttl > 0 and D > 0 then put_soft(c.slot, now + ttl) end
end

-- route: the operation, the main sequence (memory_route.go Route; Explain and Overlap branch off it).
local function route(KEYS, ARGV)
  bind(KEYS)
  read_request(ARGV)
  reset_state()
  local refused
  cfg, refused = cfg_get()
  if not cfg then return refused end
  LZ.use(cfg)   -- lv_set's lz score knobs (releases, booking): the pool's, already read
  if PG then
    release_expired(now, nows)   -- a page: the head prepared; leases expired since at now are released as any call's
  elseif mode ~= 'query' then
    local refusal = prepare()
    if refusal then return refusal end
  end
  N, SL, live = ros().n, rslots(), rlive()
  if PG and PG.b > N then PG.b = N end   -- the roster shrank: the reply's stamp and N say so
  if mode == 'explain' and PSIZE and N > PSIZE then mode = 'head' end
  overlaps()
  if mode == 'query' then return scores() end
  apply_overrides(ARGV)
  FAST = fast_allowed()
  new_route_filter(ARGV)
  read_loads()
  if PG then return explain_page() end
  if FAST then
    UNI = universe(ARGV)
    -- the head computes the reference whenever the decay applies: its pages may meet holders it did not
    if decay_d > 0 and required > 0 and (next(OV) or mode == 'head') then minPrefill = min_eligible_prefill() end
  end
  chosen = bound_rank()
  shit = chosen >= 0
  if FAST and chosen < 0 then
    local i = choose_fast()
    if i then chosen, fast = i, true end
  end
  if not (FAST and chosen >= 0) then chosen = evaluate(chosen) end
  if mode == 'explain' then return explain() end
  if mode == 'head' then return explain_head() end
  if chosen < 0 then return no_eligible() end
  local c = candidate(chosen)
  local reply = decision(chosen, c)
  book(chosen, c)
  return reply
end
return route
