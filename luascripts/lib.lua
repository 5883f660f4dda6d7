-- lib.lua — helpers shared by every kvrouter operation. The Go loader (luascripts.Library) builds ONE
-- Redis Functions library, kvrouter_v<LAYOUT>, from this file followed by every operation's body wrapped
-- as a function (KEYS, ARGV) registered as kvr<LAYOUT>_<op>; it is loaded once per node with FUNCTION LOAD
-- REPLACE, so this file's top level runs once per load, not once per call. Each operation starts with
-- bind(KEYS), which sets the key names and resets the per-call caches below (module-level locals are
-- shared by every call of the library; Redis runs one call at a time). luascripts.Source still joins this
-- file and one operation into a plain EVAL script (profiling variants, fixtures).
--
-- KEYS (the same list for every script; built by statestore.poolKeys, all under the pool's hash tag):
--   1 cfg     HASH   pool knobs (knobs_gen.lua's short field names; floats as shortest round-trip strings) and
--                    'bin': every knob as a big-endian f64, CFG_FIELDS order. While a rescoring of lz is
--                    under way (see "Rescoring in steps" below): 'pbin' the pending knobs packed as 'bin',
--                    'pargv' put_pool's ARGV (cmsgpack) written at the switch, 'rcur' the ZSCAN cursor of
--                    the walk; 'rgen' the generation of the latest rescoring started (kept afterwards)
--   2 ro      STRING the roster's directory; also the prefix of its chunks ro:<cid>, STRING each: the
--                    candidates in (worker id bytes, dp rank) order, CH at most per chunk (see "Chunked
--                    roster" below for both encodings)
--   3 wk      HASH   worker id -> cmsgpack {url, dp, tkv, mnbt, kve, rids{}, slots{}}
--   4 seen    HASH   worker id -> last heartbeat/event, ms
--   5 lv      prefix of the loads chunks lv:<cid>, STRING each: 24 bytes per candidate of roster chunk
--                    <cid>, same order: prefill tokens, decode blocks, requests (f64 each; a rank id is
--                    alive iff it is in the roster)
--   6 fence   HASH   "e"..rid epoch, "i"..rid last event id (20 zero-padded digits), "g"..rid degraded,
--                    "gn"..slot engine-map buckets, "w"..slot the slot's worker id (rlive's locate)
--   7 sc      HASH   counters: "slot", "rid", "sgen", "rc" and "rs" (reclaim: bucket and HSCAN cursor), "h"..slot held blocks, "rv" the
--                    roster's stamp (see ros), "rvn" its counter, "rcid" roster chunk ids, "lvs" the loads'
--                    stamp, a counter (lv_touch; "lvn" is a stale field of builds before 2026-12-02)
--   8 orph    HASH   slot -> held blocks whose parent is not held (only non-zero entries)
--   9 nd      HASH   slot -> held blocks without the device tier (only non-zero entries)
--  10 dead    LIST   index slots awaiting incremental reclamation
--  11 ls      HASH   request id -> cmsgpack lease {rid, prefill, decode, expiry_ms, session, session_gen}
--  12 lx      ZSET   request id scored by lease expiry, ms
--  13 ss      HASH   session id -> cmsgpack {rid, wid, gen, active, idle_at_ms}
--  14 sx      ZSET   soft entry (seq 8 bytes .. slot 4 bytes) scored by expiry, ms
--  15 e:      prefix of the event index buckets  e:<n>, n = the sequence hash's bucket (ebucket: its last 14 bits
--                    while the index has 16,384 buckets; linear hashing once it grew, sc 'egn' = bucket count):
--                    HASH seq's first 7 bytes -> parent seq(8) .. is_child(1) .. {slot u32, children·8 + tiers i32}*
--                    (tiers: bit 0 device, 1 host, 2 disk; children: held children of that slot, signed)
--  16 g:      prefix of the engine maps g:<slot>:<n>, n = the engine hash's bucket in its slot's map (gbucket:
--                    its last byte while the map has 256 buckets; linear hashing on its last 3 bytes once it
--                    grew, fence field 'gn<slot>' = bucket count): HASH engine hash's first 7 bytes -> seq(8 bytes)
--  17 s:      prefix of the soft index buckets s:<n>, n = last 10 bits of the sequence hash:
--                    HASH seq(8 bytes) -> {slot u32, expiry_ms double}*
--  18 wz      ZSET   worker ids, score 0 (memcmp order = candidate order)
--  19 hc      HASH   worker id -> consecutive failed forwards (only workers with failures; health, SPEC §7.2)
--  20 hu      HASH   worker id -> struct '>ddd' {unhealthy_until_ms, probe_until_ms, backoff_ms}: only workers
--                    marked unhealthy (the route reads this whole hash: it is empty in a healthy pool)
--  21 sy      ZSET   idle session id scored by idle_at_ms (bindings with no active request; swept once
--                    past session_affinity_ttl_ms by sweep_sessions: SPEC §8, no key grows with the
--                    number of distinct session ids ever seen)
--  22 lz      ZSET   the load order (layout 3; route's sublinear selection): one member per roster candidate,
--                    packed load (24 bytes, exactly its lv bytes) ‖ candidate key (LZ.ck), scored by the
--                    load key (LZ.score, the pool's prefill_load_scale/decode_active_request_weight/block_size).
--                    Equal scores sort by member, so one exact load is one contiguous run in candidate order:
--                    a load group. Kept by lv_set / roster_replace, rescored in steps (put_pool, rescore_step).
--  23 lc      HASH   unused since layout 5 (layouts 3-4: lz's group sizes; `pool migrate` deletes it)
--  24 sz      ZSET   worker id scored by its last heartbeat/event, ms (layout 3): seen's values as an order, so
--                    route finds the workers dead under worker_ttl_ms from its head (seen_set keeps both)
--  25 lp      ZSET   candidate key (LZ.ck) scored by its active prefill tokens (layout 3): the credit decay's
--                    reference, min prefill over the eligible ranks, is read from its head (kept with lz)
--  26 tc      HASH   cost_model ttft calibration (SPEC §6.6, statestore/ttft_route.go): rank id (decimal) ->
--                    struct '>dddddd' {prefill_rate, decode_coeff, p11, p12, p22, samples}, "p" -> the pool's
--                    fit; an absent entry is "not calibrated yet" (no migration for pools written before)
--  27 lzn     ZSET   lz being rescored with the pending knobs (cfg 'pbin'), members as lz's; exists only
--                    while a rescoring is under way (put_pool → rescore_step), then RENAMEd over lz
-- Bucket suffixes and ':'..chunk id (ro:, lv:) are the only strings appended in Lua; every key stays under
-- the pool's hash tag.

-- LAYOUT: the key-layout version (SPEC §8 "Layout version"; luascripts.Layout in Go, checked by a test).
-- Written as cfg field 'layout' by put_pool; every operation meeting a pool whose cfg holds another
-- version (or none: layout 1, before versions were recorded) answers {'layout_mismatch', found}.
local LAYOUT = '7'

local K_CFG, K_ROSTER, K_WK, K_SEEN, K_LD, K_FENCE, K_SC, K_ORPH, K_ND, K_DEAD, K_LS, K_LX, K_SS, K_SX, K_E, K_G, K_S, K_WZ
local K_HC, K_HU, K_SY, K_LZ, K_LC, K_SZ, K_LP, K_TC, K_LZN
local ROS, EC, CNT   -- per-call caches (roster, event-index entries, counter deltas), reset by bind
local LVW            -- this call's loads memo after its first loads write (lv_touch); false: none
local LZC            -- this call's pool knobs for lz scores (LZ.knobs), nil until read
local LZP            -- this call's pending knobs (cfg 'pbin': a rescoring under way), false: none, nil: unread
-- LZ_KEPT: whether this call's pool keeps its load orders lz and lp (cfg 'lzk' = '1', "Load orders only where
-- a route may walk" below), read by pool_check or cfg_get with the layout; false until then.
local LZ_KEPT
local LVC            -- this call's loads chunks read through a partial loads memo, nil until then
local LVP, LVV       -- this call's paged partial loads memo and route's view of it (lv_partial), nil: none
local GP             -- this call's engine-map parameters per slot (gparams), nil until read
-- This call's event-index bucket count as read (nil: unread; false: none), its parameters (eparams) and the
-- entries it created minus those it deleted (en_add).
local EGN, EP, ENC
-- LVS: this call's loads stamp (sc 'lvs') as last read or written (nil: unread; false: none): ros() reads it
-- with the roster stamp (one HMGET) and lv_touch writes it, the only writer of 'lvs', so lv_memo_get needs
-- no HGET of its own.
local LVS

-- bind starts a call: the pool's key names (KEYS as statestore.PoolKeys builds them) and fresh caches.
local function bind(keys)
  K_CFG, K_ROSTER, K_WK, K_SEEN, K_LD, K_FENCE, K_SC, K_ORPH, K_ND, K_DEAD, K_LS, K_LX, K_SS, K_SX, K_E, K_G, K_S, K_WZ =
    keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7], keys[8], keys[9], keys[10], keys[11], keys[12],
    keys[13], keys[14], keys[15], keys[16], keys[17], keys[18]
  K_HC, K_HU, K_SY, K_LZ, K_LC, K_SZ, K_LP, K_TC, K_LZN =
    keys[19], keys[20], keys[21], keys[22], keys[23], keys[24], keys[25], keys[26], keys[27]
  ROS, EC, CNT = nil, nil, nil   -- EC and CNT made on first use (most calls of route and done never do)
  LVW, LZC, LZP, LVC, GP, LVP, LVV = nil, nil, nil, nil, nil, nil, nil
  EGN, EP, ENC, LVS, LZ_KEPT = nil, nil, 0, nil, false
end

-- keys_spread returns the full positional key list bind expects from an operation's own keys (luascripts
-- Script.Keys): keys[j] goes to position spec's j-th number (spec: the positions as a constant string,
-- '1,2,5', parsed once into SPREAD_POS), the other positions nil. The list returned is one table reused
-- by every call (bind copies the names out at once): a lease call made a table, grew it by rehash and
-- made the positions' table on every call, garbage the collector later swept and freed.
local keys_spread
do   -- (a block: its locals do not count against the 200 of an EVAL script's main chunk, luascripts.Source)
  local SPREAD, SPREAD_POS, SPREAD_LAST = {}, {}, nil
  keys_spread = function(keys, spec)
    local pos = SPREAD_POS[spec]
    if not pos then
      pos = {}
      for p in string.gmatch(spec, '%d+') do pos[#pos + 1] = tonumber(p) end
      SPREAD_POS[spec] = pos
    end
    if SPREAD_LAST ~= pos then   -- another operation's positions: clear them
      if SPREAD_LAST then for j = 1, #SPREAD_LAST do SPREAD[SPREAD_LAST[j]] = nil end end
      SPREAD_LAST = pos
    end
    for j = 1, #pos do SPREAD[pos[j]] = keys[j] end
    return SPREAD
  end
end

-- layout_reply is the reply for a pool whose cfg records layout v (nil: none recorded).
local function layout_reply(v) return {'layout_mismatch', v or '1'} end

-- pool_check returns nil when the pool exists in this layout, else the operation's reply
-- ({'unknown_pool'} or {'layout_mismatch', found}). One HMGET on the path every operation takes (the layout,
-- and whether the pool keeps its load orders: LZ_KEPT).
local function pool_check()
  local got = redis.call('HMGET', K_CFG, 'layout', 'lzk')
  local v = got[1]
  if v == LAYOUT then LZ_KEPT = got[2] == '1'; return nil end
  if v or redis.call('EXISTS', K_CFG) == 1 then return layout_reply(v) end
  return {'unknown_pool'}
end

-- GC pacing (Lua 5.1's incremental collector; docs/REDIS.md "The Lua collector's pace"). Two things made
-- the largest calls at 4,096 ranks, whose long-lived heap (roster, loads and number-string memos: ~22 k
-- strings, ~5 k tables, ~4.5 MB) is large: (1) Redis runs lua_gc(LUA_GCSTEP, 50) after every 50th script
-- call of the node (script_lua.c), ~50 collector steps of (GCSTEPSIZE / 100) x stepmul work units, 100 k
-- units at Lua's default step multiplier of 200: ~1.06 M instructions and 0.1-0.9 ms of Redis CPU on top
-- of that call (callgrind; a timing build of Redis 7.0.15); (2) the steps Lua takes inside a call, one per
-- KB allocated, at 200 swept ~1,200 objects (0.4-0.5 M instructions) in each call that fell in the sweep.
-- gc_paced wraps every registered function: the multiplier is GC_STEPMUL_CALL while one of ours runs, so
-- the sweep is spread over 4x more calls (a cycle takes 4x more allocation: the heap peaks ~7 MB instead of
-- ~4.5 MB at 4,096 ranks, and the collector does less work per call), and GC_STEPMUL_IDLE when the call
-- returns, so Redis's forced step does 50 single collector steps (one object traversed, one string bucket
-- or 40 objects swept each). The multiplier is the Functions VM's, shared by every library on the node:
-- another library's calls run at GC_STEPMUL_IDLE unless they set it (their garbage is then collected by
-- the steps of our calls and the forced ones). A call ending in an error leaves GC_STEPMUL_CALL. A server
-- whose Lua has no collectgarbage (reading a missing global is an error in Functions) runs the operations
-- unpaced; that is found at the first call (the library's load-time sandbox has no pcall).
local gc_paced
do   -- (a block: its locals do not count against the 200 of an EVAL script's main chunk, luascripts.Source)
  local GC_STEPMUL_CALL, GC_STEPMUL_IDLE = 50, 10
  local GC_CONTROL   -- collectgarbage; false when the server's Lua lacks it; nil before the first call
  local function gc_control()
    if GC_CONTROL == nil then
      local ok, f = pcall(function() return collectgarbage end)
      GC_CONTROL = ok and type(f) == 'function' and f or false
    end
    return GC_CONTROL
  end
  gc_paced = function(op)
    return function(KEYS, ARGV)
      local gc = GC_CONTROL or (GC_CONTROL == nil and gc_control())
      if gc then gc('setstepmul', GC_STEPMUL_CALL) end
      local r = op(KEYS, ARGV)
      if gc then gc('setstepmul', GC_STEPMUL_IDLE) end
      return r
    end
  end
end

-- istr: the decimal string of integer n, memoized across calls for the small non-negative integers
-- redis.call arguments mostly are (byte offsets into a loads chunk, lz ranks) and key or
-- field names are built of (bucket numbers, slots, rank ids): a Lua number passed to
-- redis.call is formatted by Redis with snprintf("%.17g"), ~2.3 k instructions each (callgrind, Redis
-- 7.0), and Lua's own number-to-string (`..` with a number, tostring) is sprintf("%.14g"), ~1.5-2 k; a
-- memoized string costs two table lookups. Bounded: integers from 0 to ISTR_MAX only. Kept in pages of
-- ISTR_PAGE (ISTR[n − n % ISTR_PAGE][n % ISTR_PAGE + 1]): Lua 5.1 rehashes a table whole at every power of
-- two, and one flat table of up to 65,536 keys filling over a VM's first calls charged each doubling to the
-- call that crossed it (0.4 M instructions at 8,192 keys, callgrind, 4,096 workers; a cold VM after a
-- restart or failover fills it again). Small pages also bound the collector's single steps: it marks a
-- table's values in one indivisible step, and marking a string touches its header (a cache miss on a
-- heap of MBs), so a page of 256 strings made each of Redis's forced steps (see GC pacing) cost ~0.2-0.4 ms
-- at 4,096 ranks; with pages of 32 the forced steps' p90 fell from ~210 to ~55 µs (timing build of Redis,
-- step multiplier 200 in calls, 10 between).
local istr
do   -- (a block, as gc_paced's)
  local ISTR, ISTR_MAX, ISTR_PAGE = {}, 65535, 32
  function istr(n)
    local lo = n % ISTR_PAGE
    local page = ISTR[n - lo]
    local s = page and page[lo + 1]
    if s then return s end
    s = string.format('%d', n)
    if n >= 0 and n <= ISTR_MAX and lo == math.floor(lo) then
      if not page then page = {}; ISTR[n - lo] = page end
      page[lo + 1] = s
    end
    return s
  end
end
-- num: x as a redis.call argument: its decimal string when x is an integer (istr; '%d' formats integers
-- without the float formatter), else x itself (Redis's "%.17g": exact for every double). Either way Redis
-- parses the same double (−0 is left to Redis: '%d' would drop its sign).
local function num(x)
  if x == math.floor(x) and x > -2 ^ 53 and x < 2 ^ 53 and (x ~= 0 or 1 / x > 0) then return istr(x) end
  return x
end

-- NB_E: 16384 event buckets keep each listpack near 61 entries at 1 M entries (every HGET scans its bucket
-- linearly): ~15-20 % less Redis time per route decision than 4096 (~245 entries) for +1.3 B per entry.
local NB_E, NB_G, NB_S = 16384, 256, 1024
local GMAX = 8388608           -- engine-map buckets per slot at most (2^23: gbucket hashes 24 bits)
local GSPLITS = 8              -- engine-map splits per rank and apply_events call at most
-- RECLAIM_CALLS: Redis calls of dead-slot reclamation per call (reclaim's budget, the same for apply_events
-- and route; remove_worker reclaims nothing): ~0.2-0.5 M instructions, ~5 entries a call at 4,096 ranks.
-- A budget in entries (16 until the fourteenth session, 128 before the thirteenth) let a call's cost follow
-- the buckets' shape: at 4,096 ranks each entry came with a bucket walk of its own (buckets hold ~1), and
-- 16 entries made a route 2.6-3.5 M instructions, 128 made remove_worker ~17 M (callgrind). RECLAIM_PAGE:
-- the HSCAN COUNT of that walk, fixed so that a page re-read from the same cursor is the same page.
local RECLAIM_CALLS, RECLAIM_PAGE = 16, 64
local SOFT_SWEEP = 256         -- expired soft entries swept per call
local SESS_SWEEP = 32          -- expired idle session bindings reclaimed per route call
local SESS_CAP = 262144        -- live session bindings per pool (statestore.MaxSessionsPerPool)
local RESCORE_TICK = 32        -- lz members rescored by a writing call's LZ.tick (~0.05 ms at 4,096 ranks)

local function sbucket(seq) local a, b = string.byte(seq, 7, 8); return K_S .. istr((a * 256 + b) % NB_S) end
-- Bucketed maps that grow: the event index (pool-wide, e:) and each slot's engine map (g:<slot>:) split
-- their buckets by linear hashing (Litwin, "Linear hashing: a new tool for file and table addressing",
-- VLDB 1980), so every bucket stays a listpack of about GLOAD entries (at most ~2·GLOAD: the buckets not
-- yet split this round hold twice the others) however many entries the map holds. Fixed counts (16,384
-- index buckets, 256 per engine map) put 512 entries in a bucket at 8.4 M index entries or 131 k blocks
-- on one rank (host-tier offload: millions), beyond which Redis turns a bucket into a hashtable for good:
-- 2× the memory per entry (docs/PERFORMANCE.md "Engine maps that grow"). A map created by layout 4 records
-- its bucket count (event index: sc field 'egn', written by put_pool when it creates the pool; engine map:
-- fence field 'gn<slot>', by new_slot — fence holds ingest-side state route reads only on a cold slot map, so these
-- per-slot fields do not lengthen the sc hash route reads several times a decision: +2 % instructions per
-- decision at 64 slots when they were in sc); a map without one (written by layout 3) keeps its fixed
-- count for life. Its
-- parameters {nb, lo = 2^L ≤ nb < 2^(L+1), p = nb − lo (the next bucket to split), grow}: lh_params.
local function lh_params(v, base)
  local nb = tonumber(v or '') or base
  local lo = base
  while lo * 2 <= nb do lo = lo * 2 end
  return {nb = nb, lo = lo, p = nb - lo, grow = v and true or false}   -- an absent field is false, not nil
end
-- lh_addr: the bucket of h (a hash's last 3 bytes: up to GMAX buckets) under parameters g: h mod lo, or
-- h mod 2·lo for the buckets already split this round (below p). With the base count (2^14 or 2^8) that is
-- layout 3's address (the low 14 bits; the last byte). The bucket fixes h's low 8 bits at least, so a
-- 7-byte field (the hash's first 7 bytes) still identifies the hash.
local function lh_addr(h, g)
  local k = h % g.lo
  if k < g.p then k = h % (2 * g.lo) end
  return k
end
-- lh_split: linear hashing's split of bucket p of the map whose bucket keys are pre .. n: its entries
-- whose hash has bit L set (lo = 2^L) move to bucket p + lo, read from the field (bit L ≥ 8 lies in the
-- hash's bytes 6-7); then nb + 1, written to field cnt of hash ck. One HGETALL of ≤ ~2·GLOAD entries, one HSET, one
-- HDEL and the count. Returns the entries read: a split costs ~1 µs per entry (HSET and HDEL of many fields
-- scan the listpack once per field), 0.15 ms at 200 entries, 0.4–0.7 ms at 400.
local function lh_split(pre, g, ck, cnt)
  local from = pre .. istr(g.p)
  local kv = redis.call('HGETALL', from)
  local mv, del, d = {}, {}, g.lo / 256
  for i = 1, #kv, 2 do
    local a, b = string.byte(kv[i], 6, 7)
    if math.floor((a * 256 + b) / d) % 2 == 1 then
      mv[#mv + 1], mv[#mv + 2] = kv[i], kv[i + 1]
      del[#del + 1] = kv[i]
    end
  end
  if #del > 0 then
    redis.call('HSET', pre .. istr(g.p + g.lo), unpack(mv))
    redis.call('HDEL', from, unpack(del))
  end
  g.nb, g.p = g.nb + 1, g.p + 1
  if g.p == g.lo then g.lo, g.p = 2 * g.lo, 0 end
  redis.call('HSET', ck, cnt, istr(g.nb))
  return #kv / 2
end
-- eparams: the event index's parameters (lh_params), once per call; ros() reads its count with the roster
-- stamp (one HMGET), else one HGET.
local function eparams()
  if not EP then
    if EGN == nil then EGN = redis.call('HGET', K_SC, 'egn') end
    EP = lh_params(EGN, NB_E)
  end
  return EP
end
-- ebn: the event-index bucket number of a sequence hash whose bytes 6, 7, 8 are x, a, b.
local function ebn(x, a, b)
  local g = EP or eparams()
  if g.nb == NB_E then return (a * 256 + b) % NB_E end
  return lh_addr((x * 256 + a) * 256 + b, g)
end
local function ebucket(seq) return K_E .. istr(ebn(string.byte(seq, 6, 8))) end
-- en_add counts event-index entries created (d > 0) or deleted (d < 0) by this call; en_flush adds them to
-- sc 'en', the index's entry count (what its growth is decided by). Pools of layout 3 have no count.
local function en_add(d) ENC = ENC + d end
local function en_flush()
  if ENC ~= 0 then redis.call('HINCRBY', K_SC, 'en', istr(ENC)); ENC = 0 end
end
-- gparams returns slot's engine-map parameters (lh_params), read once per call (one HGET of fence); v:
-- fence field 'gn<slot>' when the caller already read it (false: absent), nil to read it here.
local function gparams(slot, v)
  if not GP then GP = {} end
  local g = GP[slot]
  if not g then
    if v == nil then v = redis.call('HGET', K_FENCE, 'gn' .. slot) end
    g = lh_params(v, NB_G)
    GP[slot] = g
  end
  return g
end
-- gbucket: engine hash e's bucket under parameters g (the last byte while the map has 256 buckets).
local function gbucket(e, g)
  if g.nb == NB_G then return string.byte(e, 8) end
  local a, b, c = string.byte(e, 6, 8)
  return lh_addr((a * 256 + b) * 256 + c, g)
end
local function gkey(slot, engine) return K_G .. istr(slot) .. ':' .. istr(gbucket(engine, gparams(slot))) end
-- Fields drop the hash's last byte, which the bucket number already fixes (e: its low 14 bits select the
-- bucket; g: its last byte at least does), so a field is 7 bytes and still unique within its bucket.
local function efield(seq) return string.sub(seq, 1, 7) end
local function gfield(engine) return string.sub(engine, 1, 7) end

-- CFG_FIELDS, CFG_OVERRIDES and the filter reasons R_* come from knobs_gen.lua (generated from statestore's
-- knob table), which precedes this file.
-- CFG_FMT: cfg field 'bin', every knob as f64 in CFG_FIELDS order. Built on first use: a library's top
-- level runs at FUNCTION LOAD, where Redis 7.0 exposes no standard library (no `string`).
local CFG_FMT = nil

-- Memos across calls: a library's module-level state outlives a call (an EVAL script's did not). Each
-- memo maps a string read from Redis to its parsed form, keyed by the whole string, so a changed value
-- can never hit a stale entry (and one Redis holding many pools only costs memo space). Parsed forms are
-- read-only for callers. Bounded: a memo is emptied when it reaches MEMO.cap entries.
-- MEMO.cfg: cfg 'bin' -> knobs table; MEMO.ros: roster stamp -> parsed directory (ros()); MEMO.n_*: sizes.
-- MEMO.ch: (chunk key, era) -> parsed roster chunk (rch), cap_ch entries (a deleted chunk's entry is dropped).
-- MEMO.lx: lease-expiry key name -> a lower bound of its earliest expiry (release_expired; not a parse: see there).
local MEMO = {cap = 64, cfg = {}, n_cfg = 0, ros = {}, n_ros = 0, lv = {}, n_lv = 0, ch = {}, n_ch = 0, cap_ch = 4096, lx = {}, n_lx = 0}
-- MEMO.empty empties t for the next call and returns it, or a new empty table (metatable mt) when the
-- last call had filled it with more than MEMO.keep entries: Lua never shrinks a table on deletions, and
-- `pairs` over the empty slots of a table one large call grew (an explain of thousands of holders, a long
-- prompt's positions, a batch of removals) would cost every later call. For the operations written as
-- modules (route, apply_events), which keep their per-call tables instead of making and growing new ones.
-- (A field of MEMO, not a local of its own: route's module function is at Lua 5.1's 60 upvalues.)
MEMO.keep = 64
function MEMO.empty(t, mt)
  local n = 0
  for k in pairs(t) do t[k], n = nil, n + 1 end
  if n > MEMO.keep then return setmetatable({}, mt) end
  return t
end

-- cfg_parse returns the knobs packed in cfg field 'bin' (b) as a table by short name, memoized (MEMO.cfg).
local function cfg_parse(b)
  local memo = MEMO.cfg[b]
  if memo then return memo end
  local c = {}
  local n = #b / 8
  local f
  if not CFG_FMT then CFG_FMT = '>' .. string.rep('d', #CFG_FIELDS) end
  if n >= #CFG_FIELDS then f = {struct.unpack(CFG_FMT, b)} else f = {struct.unpack('>' .. string.rep('d', n), b)} end
  for i, name in ipairs(CFG_FIELDS) do if i <= n then c[name] = f[i] else c[name] = 0 end end
  if MEMO.n_cfg >= MEMO.cap then MEMO.cfg, MEMO.n_cfg = {}, 0 end
  MEMO.cfg[b], MEMO.n_cfg = c, MEMO.n_cfg + 1
  return c
end

-- cfg_get returns the pool's knobs as numbers, or nil and the operation's reply when the pool does not
-- exist or was written by another layout (pool_check's replies). One HMGET (the packed knobs, the
-- layout version, the pending knobs of a rescoring under way, kept for LZ's mirroring, and 'lzk': LZ_KEPT).
local function cfg_get()
  local got = redis.call('HMGET', K_CFG, 'bin', 'layout', 'pbin', 'lzk')
  local b, v = got[1], got[2]
  if v ~= LAYOUT then
    if v or b or redis.call('EXISTS', K_CFG) == 1 then return nil, layout_reply(v) end
    return nil, {'unknown_pool'}
  end
  LZ_KEPT = got[4] == '1'
  LZP = got[3] and cfg_parse(got[3]) or false
  return cfg_parse(b)
end

-- cfg_override returns the knobs with a route request's overrides applied: argv[first] (the operation's
-- ARGV, a parameter: inside a Functions library ARGV is no global) is '' when the request overrides nothing,
-- else one value per CFG_OVERRIDES knob in that order, joined by ',' ('' = keep the pool's value): one
-- argument rather than one per knob, because Redis builds a Lua string per argument on every call. cfg
-- itself is never written (it may be MEMO.cfg's shared table): with an override, a copy is returned. Also
-- returns the index of the next ARGV.
local function cfg_override(cfg, argv, first)
  local a = argv[first]
  if a == '' then return cfg, first + 1 end
  local out, j = {}, 0
  for k, v in pairs(cfg) do out[k] = v end
  for v in string.gmatch(a .. ',', '([^,]*),') do
    j = j + 1
    if v ~= '' and CFG_OVERRIDES[j] then out[CFG_OVERRIDES[j]] = tonumber(v) end
  end
  return out, first + 1
end


-- Records kept with cmsgpack (Lua arrays); these tables name their fields' indices (tables, not one
-- local per field: an EVAL script of lib + route must stay under Lua's 200 locals per function).
-- worker (wk): url, dp size, total_kv_blocks, max_num_batched_tokens, kv_events (-1 pool default/0/1),
-- rank ids {per dp rank}, index slots {per dp rank}
local W = {URL = 1, DP = 2, TKV = 3, MNBT = 4, KVE = 5, RIDS = 6, SLOTS = 7}
-- lease (ls): rank id, prefill tokens still booked, decode blocks, expiry ms, session id ('' none), the
-- session binding's generation, the rank's roster index when booked (a hint for rid_locate; absent in
-- leases booked before it was recorded), the rank's candidate key (LZ.ck: fixed for a rank id while its
-- slot is, so a release moves its lz member without reading the roster; absent in leases of layout 2);
-- cost_model ttft only, until prefill_done calibrates on them: the features x1 = active_prefill_tokens +
-- booked prefill and x2 = active_decode_blocks of the rank before booking, and the decision time, ms
-- (absent in leases booked before they were recorded: no calibration)
local L = {RID = 1, PREFILL = 2, DECODE = 3, EXPIRY = 4, SESSION = 5, SGEN = 6, IDX = 7, CK = 8, X1 = 9, X2 = 10, T = 11}
-- session binding (ss): rank id, worker id, generation, active requests, idle since ms
local S = {RID = 1, WID = 2, GEN = 3, ACTIVE = 4, IDLE = 5}

-- Chunked roster (KEYS[2] `ro`, the directory; chunks `ro:<cid>`) and loads (chunks `lv:<cid>`; KEYS[5]
-- `lv` is only their key prefix). The candidates in (worker id bytes, dp rank) order are cut into chunks
-- of at most CH candidates (a worker of more ranks spans several chunks), each its own string
-- key under the pool's hash tag (the name is a KEYS prefix plus ':' and the chunk id, as e:/s:/g:):
--   ro:<cid>  u32 n, then the chunk's n slots (u32 each, one column for a single bulk unpack), then n
--             fixed RW-byte records (RREC: slot u32, rid u32, rank u32, max_num_batched_tokens f64,
--             total_kv_blocks f64, kv_events i8 (-1/0/1), worker id offset u32, length u32, url offset
--             u32, length u32), then the chunk's strings area (offsets relative to its start; the ranks
--             of one worker share one copy)
--   lv:<cid>  24 bytes per candidate of the chunk, same order: prefill tokens, decode blocks, requests
--             (f64 each; a rank id is alive iff it is in the roster)
--   ro        the directory: u8 length of the era, the era (a stamp: server TIME µs ‖ counter 'rvn'), then
--             one entry per chunk in candidate order: u32 cid, u32 n, u16 length of the chunk's first
--             worker id, that worker id.
-- Chunks are copy-on-write: a chunk is never changed in place (only its loads are), a change writes new
-- chunks under fresh ids (sc counter 'rcid') and deletes the old keys, so (era, cid) names one chunk
-- content forever and parsed chunks are memoized by it (MEMO.ch) across calls. The era changes when the
-- directory is created, so a pool deleted and recreated (counters restart) never meets old memos.
-- A global candidate index i (1-based, candidate order) maps to (chunk c, offset j) through the
-- directory's prefix counts (rloc: binary search). Registration, removal and spec changes rewrite only the
-- chunks holding the worker's ranks (roster_replace): O(CH + dp) Lua work, O(W/CH) for the directory.
-- RREC is one candidate's record, RW its width; ROFF are byte offsets of its fields within the record.
local RREC, RW = '>I4I4I4ddbI4I4I4I4', 45
local ROFF = {RID = 4, RANK = 8, MNBT = 12, TKV = 20, KVE = 28, WID = 29, URL = 37}
local CH = 64   -- candidates per chunk (split above; a chunk under CH/2 absorbs its successor when both fit)
-- ZL: zero loads of one candidate, built on first use (FUNCTION LOAD's top level has no `string`).
local ZL = nil
local function zl() if not ZL then ZL = string.rep('\0', 24) end return ZL end
-- Roster stamp: every directory write also writes sc field 'rv' = a stamp unique to that content (TIME µs
-- and the per-pool counter 'rvn', so a pool deleted and recreated, or a flushed server, never reuses one),
-- and ros() memoizes the parsed directory by key name + stamp: a route then reads the roster with one
-- HGET, and after one registration re-reads only the chunks that changed. (Until 2026-12-02 the memo key
-- also held STRLEN of the directory, one more call per operation: it guarded against builds from before
-- the stamp, which wrote the directory without it; every layout-3 writer writes the stamp, and other
-- layouts are refused by pool_check/cfg_get.)
local function ros_memo(key, R)
  if MEMO.n_ros >= MEMO.cap then MEMO.ros, MEMO.n_ros = {}, 0 end
  MEMO.ros[key], MEMO.n_ros = R, MEMO.n_ros + 1
  R.mkey = key   -- (dir_splice drops the entry of a directory it consumes)
end
local function ch_memo(key, C)
  if MEMO.n_ch >= MEMO.cap_ch then MEMO.ch, MEMO.n_ch = {}, 0 end
  MEMO.ch[key], MEMO.n_ch = C, MEMO.n_ch + 1
end
local function new_stamp()
  local t = redis.call('TIME')
  return t[1] .. '.' .. t[2] .. '.' .. redis.call('HINCRBY', K_SC, 'rvn', 1)
end
local function ros_empty() return {ds = '', era = '', k = 0, n = 0, cid = {}, cn = {}, st = {}, fw = {}, off = {}, ch = {}} end
-- dir_parse parses a directory string (see above) into {ds (the string), era, k chunks, n candidates,
-- cid[c], cn[c] (its count), st[c] (candidates before it), fw[c] (its first worker id), off[c] (its
-- entry's offset in ds), ch[c] (parsed chunk, lazily: rch), slots/live (columns, lazily)}.
local function dir_parse(s)
  local R = ros_empty()
  local el = string.byte(s, 1)
  R.ds, R.era = s, string.sub(s, 2, 1 + el)
  local off = 2 + el
  while off <= #s do
    local cid, n, wl = struct.unpack('>I4I4I2', s, off)
    local k = R.k + 1
    R.cid[k], R.cn[k], R.st[k], R.fw[k], R.off[k] = cid, n, R.n, string.sub(s, off + 10, off + 9 + wl), off
    R.k, R.n = k, R.n + n
    off = off + 10 + wl
  end
  return R
end
-- ros returns the parsed directory, memoized across calls by stamp (or by content, without a stamp).
local function ros()
  if not ROS then
    local got = redis.call('HMGET', K_SC, 'rv', 'egn', 'lvs')   -- the event index's count (eparams), the loads stamp
    local stamp = got[1] or nil
    if EGN == nil then EGN = got[2] end
    if LVS == nil then LVS = got[3] end
    local key = nil
    if stamp then
      key = K_ROSTER .. '\0' .. stamp
      ROS = MEMO.ros[key]
      if ROS then return ROS end
    end
    local s = redis.call('GET', K_ROSTER)
    if not s then ROS = ros_empty()
    else
      ROS = MEMO.ros[K_ROSTER .. '\0' .. s]
      if not ROS then
        ROS = dir_parse(s)
        ros_memo(key or (K_ROSTER .. '\0' .. s), ROS)
      end
    end
  end
  return ROS
end
-- chunk_parse: a chunk string's {s, n, rb (first record), str (strings area), slots (column, lazily)}.
local function chunk_parse(s)
  if #s < 4 then return {s = '', n = 0, rb = 5, str = 5} end
  local n = struct.unpack('>I4', s, 1)
  return {s = s, n = n, rb = 5 + 4 * n, str = 5 + 4 * n + n * RW}
end
local function ch_key(R, c) return K_ROSTER .. ':' .. R.cid[c] .. '\0' .. R.era end
-- rch returns chunk c of the roster (parsed; from this roster, the chunk memo, or one GET).
local function rch(c)
  local R = ROS
  local C = R.ch[c]
  if C then return C end
  local mk = ch_key(R, c)
  C = MEMO.ch[mk]
  if not C then
    C = chunk_parse(redis.call('GET', K_ROSTER .. ':' .. R.cid[c]) or '')
    ch_memo(mk, C)
  end
  R.ch[c] = C
  return C
end
-- rch_all makes every chunk available (one MGET per 256 chunks not memoized) for whole-column readers.
local function rch_all()
  local R = ros()
  if R.all then return R end
  local miss = {}
  for c = 1, R.k do
    if not R.ch[c] then
      local C = MEMO.ch[ch_key(R, c)]
      if C then R.ch[c] = C else miss[#miss + 1] = c end
    end
  end
  for from = 1, #miss, 256 do
    local to = math.min(#miss, from + 255)
    local keys = {}
    for j = from, to do keys[#keys + 1] = K_ROSTER .. ':' .. R.cid[miss[j]] end
    local got = redis.call('MGET', unpack(keys))
    for j = from, to do
      local c = miss[j]
      local C = chunk_parse(got[j - from + 1] or '')
      ch_memo(ch_key(R, c), C)
      R.ch[c] = C
    end
  end
  R.all = true
  return R
end
-- rloc returns the chunk c and the offset j (1-based) within it of candidate i (1 <= i <= n): a binary
-- search of the prefix counts, skipped when i falls in the chunk the previous lookup found.
local function rloc(i)
  local R = ROS or ros()
  local c = R.lc
  if c and i > R.st[c] and i <= R.st[c] + R.cn[c] then return c, i - R.st[c] end
  local lo, hi = 1, R.k
  while lo < hi do
    local mid = math.floor((lo + hi + 1) / 2)
    if R.st[mid] < i then lo = mid else hi = mid - 1 end
  end
  R.lc = lo
  return lo, i - R.st[lo]
end
-- rrec returns candidate i (1-based): slot, rid, rank, max_num_batched_tokens, total_kv_blocks, kv_events, wid, url.
local function rrec(i)
  local c, j = rloc(i)
  local C = rch(c)
  local slot, rid, rank, mnbt, tkv, kve, wo, wl, uo, ul = struct.unpack(RREC, C.s, C.rb + (j - 1) * RW)
  return slot, rid, rank, mnbt, tkv, kve, string.sub(C.s, C.str + wo, C.str + wo + wl - 1), string.sub(C.s, C.str + uo, C.str + uo + ul - 1)
end
local function rwid(i)
  local c, j = rloc(i)
  local C = rch(c)
  local wo, wl = struct.unpack('>I4I4', C.s, C.rb + (j - 1) * RW + ROFF.WID)
  return string.sub(C.s, C.str + wo, C.str + wo + wl - 1)
end
-- rnum returns candidate i's f64 field at record offset off (ROFF.MNBT, ROFF.TKV): one field, no column.
local function rnum(i, off)
  local c, j = rloc(i)
  local C = rch(c)
  return (struct.unpack('>d', C.s, C.rb + (j - 1) * RW + off))
end

-- Load order (key lz; layout 3, without lc since layout 5): route's sublinear selection reads it from the
-- head (route.lua choose_fast; the memory store's memory_loadorder.go + memory_select.go, whose proof it
-- follows). A member is packed load (24 bytes, '>ddd': lv's bytes) ‖ candidate key LZ.ck; its score is
-- LZ.score of the load. Members with equal scores sort by their bytes, so the candidates with one exact
-- load form one contiguous run of lz ordered by candidate key = candidate order (a load group; route finds
-- its size with ZCOUNT of its score, choose_fast's group_size). Layouts 3 and 4 also kept each load's member
-- count in lc: two to three more writes on every booking and release, for a count route rarely needs.
-- Maintained in one place per kind of write: lv_set (every loads change), roster_replace (a worker's
-- members out and in: registration, removal, spec and dp changes), put_pool and rescore_step (LZ.begin,
-- LZ.step: a rescoring in bounded steps after a scoring knob changed, see "Rescoring in steps" below).
--
-- Load orders only where a route may walk (layout 7). A route over at most S ranks (statestore's
-- fullScanMaxRanks, 64: route's SCAN_MAX) takes the full scan and never reads lz or lp, yet every booking
-- and release moved a member of each (ZREM + ZADD, ZADD): 3-11 % of a decision's Redis CPU at 64 workers
-- (docs/PERFORMANCE.md "Twenty-third session"). So a pool keeps them only once cfg field 'lzk' is '1'
-- (LZ_KEPT, read with the layout): put_worker sets it when a registration leaves the pool with more than its
-- argument S ranks, building both from the roster and its loads first (LZ.build: O(S + dp), once), and
-- route walks only a pool that keeps them. A pool never stops keeping them (one that shrinks below S again
-- just pays as before; no flapping at the bound). Until then LZ.add, LZ.remove and lv_set's move do nothing,
-- and with no lz a put_pool applies scoring knobs at once (no rescoring). Layout 6 kept them for every pool
-- and its routers walk pools of any size (those before the full-scan bound) — hence the layout: 6 → 7 is a
-- `pool migrate` that sets 'lzk' (a layout-6 pool's orders are complete).
local LZ = {}
-- LZ.kept: whether this call's pool keeps its load orders (LZ_KEPT, for the operations' modules).
function LZ.kept() return LZ_KEPT end
-- LZ.ck: the candidate key of (worker id, dp rank, index slot). Sorts like the candidate order (worker id
-- bytes, then rank): NUL in the id is escaped as \0\1 and the id ends with \0\0, so a prefix sorts first;
-- the slot after the rank never decides (a (worker, rank) pair is unique) but names the roster index
-- through rlive (LZ.index) without any search.
function LZ.ck(wid, rank, slot)
  return (string.gsub(wid, '%z', '\0\1')) .. '\0\0' .. struct.pack('>I4I4', rank, slot)
end
-- LZ.rck: candidate i's key (roster index, 1-based).
function LZ.rck(i)
  ros()
  local c, j = rloc(i)
  local C = rch(c)
  local slot, _, rank = struct.unpack('>I4I4I4', C.s, C.rb + (j - 1) * RW)
  return LZ.ck(rwid(i), rank, slot)
end
-- LZ.slot: the index slot named by member (or candidate key) m.
function LZ.slot(m) return (struct.unpack('>I4', m, #m - 3)) end
-- LZ.fresh returns ck when it still names candidate i, else nil. A lease records its candidate key when
-- booked, but an engine restart (apply_events' clear_rank) gives a living rank a new index slot, so the
-- recorded key's slot may be stale: moving that key would leave a member of a dead slot in lz.
function LZ.fresh(ck, i)
  if not ck then return nil end
  local c, j = rloc(i)
  local C = rch(c)
  if struct.unpack('>I4', C.s, C.rb + (j - 1) * RW) ~= LZ.slot(ck) then return nil end
  return ck
end
-- LZ.knobs: the pool's scoring knobs (cfg's packed 'bin', whatever its layout: migrate reads it too; once
-- per call), and the pending knobs of a rescoring under way (LZP) read with them.
function LZ.knobs()
  if not LZC then
    local got = redis.call('HMGET', K_CFG, 'bin', 'pbin')
    LZC, LZP = cfg_parse(got[1]), got[2] and cfg_parse(got[2]) or false
  end
  return LZC
end
-- LZ.use: this call's scoring knobs are the pool's knobs c (a caller that already read them with cfg_get,
-- which also read the pending ones).
function LZ.use(c)
  LZC = c
  if LZP == nil then LZP = false; local b = redis.call('HGET', K_CFG, 'pbin'); if b then LZP = cfg_parse(b) end end
end
-- LZ.pending: the pending knobs while a rescoring is under way (every lz write is mirrored into lzn,
-- scored by them), else false.
function LZ.pending() LZ.knobs(); return LZP end
-- LZ.score: a load's key, memory_loadorder.go loadKey operation by operation (prefill_load_scale ·
-- (prefill / block_size) + decode blocks + decode_active_request_weight · requests).
function LZ.score(c, p, d, r) return c.pls * (p / c.bs) + d + c.rw * r end
-- LZ.skiplist: lz and lp in Redis's skiplist encoding, not listpack. Why: every booking and release moves
-- one lz member (ZREM + ZADD) and one lp score, and a listpack-encoded sorted set (what Redis keeps while a
-- set has at most zset-max-listpack-entries = 128 members of at most zset-max-listpack-value = 64 bytes:
-- any pool of short worker ids) re-parses the scores of the members before the insertion point on every
-- ZADD (zzlInsert, zzlFind: ~26 k instructions per ZADD at 64 members, 10 % of a decision's Redis
-- instructions), where a skiplist ZADD is a dict lookup and an O(log W) walk. Adding then removing one member
-- longer than 64 bytes converts a set to a skiplist, and Redis 7 never converts it back on removals; it
-- does on an RDB load and when the set empties (the key is deleted). So it is done once per pool per Lua
-- VM (LZ_SK, by lz key name: a fresh VM after a restart or failover redoes it), again after a roster write
-- (LZ.add, LZ.remove) or a rescoring's switch, and only by writers (LZ.move). On a missing key the probe
-- is a no-op (added, then the last member removed). Encoding only: ranks, ranges and scores are the same
-- in both, so no reader changes; with the defaults changed (a server configured otherwise) it is merely
-- not faster. SK_PROBE cannot be a member: lz members start with three packed f64 loads (0xff bytes are
-- a NaN, never a load) and lp members with a worker id (valid UTF-8, which never holds 0xff).
local SK_PROBE   -- (made on first use: the library's load has no string library)
local LZ_SK = {}
function LZ.skiplist()
  SK_PROBE = SK_PROBE or string.rep('\255', 65)
  for _, k in ipairs({K_LZ, K_LP}) do
    redis.call('ZADD', k, '0', SK_PROBE)
    redis.call('ZREM', k, SK_PROBE)
  end
  LZ_SK[K_LZ] = true
end
-- lease_encodings: the lease keys (ls HASH, lx ZSET) out of listpack encoding once they hold LEASES_MANY
-- leases or more. Why: each decision writes ls and lx (route: HSET, ZADD) and each done reads and deletes
-- (HGET, HDEL, ZREM); in a listpack every one of those scans the whole key (a hash stays a listpack up to
-- 512 fields, a sorted set up to 128 members), so a pool with ~100 requests in flight spent ~45 k more
-- Redis instructions per decision (5 %) than one with a single request (PERFORMANCE.md "Seventh session").
-- Past those sizes Redis converts them itself; below LEASES_MANY a listpack is as cheap, and the keys come
-- and go with the last lease, so they are left alone. Checked every LEASES_CHECK load moves of a pool (one
-- HLEN), from LZ.move because every booking and release passes there; converted as LZ.skiplist does (a
-- field and value, a member, of 65 bytes added and removed; SK_PROBE is no request id: ids are valid UTF-8).
local LEASES_CHECK, LEASES_MANY = 64, 32
local LS_MOVES = {}   -- lease-key name -> load moves since the last check (this Lua VM)
local function lease_encodings()
  local n = (LS_MOVES[K_LS] or 0) + 1
  if n < LEASES_CHECK then LS_MOVES[K_LS] = n; return end
  LS_MOVES[K_LS] = 0
  if redis.call('HLEN', K_LS) < LEASES_MANY then return end
  SK_PROBE = SK_PROBE or string.rep('\255', 65)
  redis.call('HSET', K_LS, SK_PROBE, SK_PROBE)
  redis.call('HDEL', K_LS, SK_PROBE)
  redis.call('ZADD', K_LX, '0', SK_PROBE)
  redis.call('ZREM', K_LX, SK_PROBE)
end
-- LZ.move moves candidate key ck from load old to load new (24-byte strings, old ≠ new), and its lp
-- score when the prefill tokens changed.
function LZ.move(ck, old, new)
  redis.call('ZREM', K_LZ, old .. ck)
  local p, d, r = struct.unpack('>ddd', new)
  redis.call('ZADD', K_LZ, LZ.score(LZ.knobs(), p, d, r), new .. ck)
  if LZP then
    redis.call('ZREM', K_LZN, old .. ck)
    redis.call('ZADD', K_LZN, LZ.score(LZP, p, d, r), new .. ck)
  end
  if string.sub(old, 1, 8) ~= string.sub(new, 1, 8) then redis.call('ZADD', K_LP, num(p), ck) end
  if not LZ_SK[K_LZ] then LZ.skiplist() end
  lease_encodings()
end
-- LZ.zadd adds members (load ‖ key strings) to the sorted set key scored by knobs c: ZADD 256 at a time.
function LZ.zadd(key, c, members)
  local args = {}
  for _, m in ipairs(members) do
    local p, d, r = struct.unpack('>ddd', m)
    args[#args + 1] = LZ.score(c, p, d, r)
    args[#args + 1] = m
    if #args >= 512 then redis.call('ZADD', key, unpack(args)); args = {} end
  end
  if #args > 0 then redis.call('ZADD', key, unpack(args)) end
end
-- LZ.add adds members (load ‖ key strings) to lz (and lzn while a rescoring is under way) and their
-- prefill tokens to lp.
function LZ.add(members)
  if not LZ_KEPT then return end
  LZ_SK[K_LZ] = nil
  local pargs = {}
  LZ.zadd(K_LZ, LZ.knobs(), members)
  if LZP then LZ.zadd(K_LZN, LZP, members) end
  for _, m in ipairs(members) do
    pargs[#pargs + 1] = (struct.unpack('>d', m))
    pargs[#pargs + 1] = string.sub(m, 25)
    if #pargs >= 512 then redis.call('ZADD', K_LP, unpack(pargs)); pargs = {} end
  end
  if #pargs > 0 then redis.call('ZADD', K_LP, unpack(pargs)) end
end
-- LZ.remove removes members (load ‖ key strings) from lz and their keys from lp.
function LZ.remove(members)
  if #members == 0 or not LZ_KEPT then return end
  LZ_SK[K_LZ] = nil
  local keys = {}
  for j, m in ipairs(members) do keys[j] = string.sub(m, 25) end
  redis.call('ZREM', K_LZ, unpack(members))
  if LZ.pending() then redis.call('ZREM', K_LZN, unpack(members)) end
  redis.call('ZREM', K_LP, unpack(keys))
end
-- LZ.of returns the lz members of roster-write candidates list[a..b] ({slot, rid, rank, mnbt, tkv, kve,
-- wid, url, loads}: lib's roster writers' shape).
function LZ.of(list, a, b)
  local out = {}
  for i = a or 1, b or #list do
    local x = list[i]
    out[#out + 1] = x[9] .. LZ.ck(x[7], x[3], x[1])
  end
  return out
end

-- Rescoring in steps. lz's scores depend on the knobs prefill_load_scale, decode_active_request_weight
-- and block_size (LZ.score); rewriting every member in one call is O(W log W), ~7-12 ms at 4,096 ranks,
-- against SPEC §8's bounded calls. So a put_pool changing one of them on a pool with lz members does not
-- apply its knobs at once: it records them as pending (cfg 'pbin', and its whole ARGV 'pargv', under a
-- new generation 'rgen') and rescore_step calls walk lz with ZSCAN from a stored cursor ('rcur'), a bounded
-- number of members per call, adding each to lzn scored by the pending knobs. Meanwhile every lz write
-- (LZ.move, LZ.add, LZ.remove) is mirrored into lzn with the pending knobs' score, and every operation
-- keeps using cfg 'bin', the knobs lz is scored by, for the costs AND the order (every knob of the
-- put_pool waits: one PutPool takes effect at once, as in the memory store). ZSCAN returns every member
-- present for the whole walk at least once; a member added or moved during the walk is in lzn by the
-- mirroring; one removed is removed from lzn too: when the walk ends, lzn is exactly lz rescored. The
-- step that ends it swaps atomically: UNLINK lz (freed in the background), RENAME lzn lz, put_pool's
-- ARGV and 'pbin' become the pool's knobs. ZSCAN's COUNT is a hint (a listpack-encoded set, at most
-- zset-max-listpack-entries members, comes whole) and visits at most 10·COUNT empty buckets per call.
-- A router of a build before this one does not mirror (docs/REDIS.md "Rescoring in steps").

-- LZ.cancel drops a rescoring under way (its partial lzn, UNLINKed: freed in the background) and its
-- pending state; the generation stays.
function LZ.cancel()
  redis.call('UNLINK', K_LZN)
  redis.call('HDEL', K_CFG, 'pbin', 'pargv', 'rcur')
  LZP = false
end
-- LZ.begin starts a rescoring to the knobs packed in pbin (put_pool's ARGV argv, cmsgpack): a new
-- generation, an empty lzn, the walk at cursor 0. Returns the generation.
function LZ.begin(pbin, argv)
  redis.call('UNLINK', K_LZN)
  local gen = redis.call('HINCRBY', K_CFG, 'rgen', 1)
  redis.call('HSET', K_CFG, 'pbin', pbin, 'pargv', argv, 'rcur', '0')
  LZP = cfg_parse(pbin)
  return gen
end
-- LZ.switch ends a rescoring whose walk is complete: lzn becomes lz, the pending knobs the pool's.
-- A cardinality mismatch (a writer that did not mirror: a router of an older build during a rolling
-- upgrade) restarts the walk instead. Returns whether it switched.
function LZ.switch()
  local n = redis.call('ZCARD', K_LZ)
  if redis.call('ZCARD', K_LZN) ~= n then
    redis.call('UNLINK', K_LZN)
    redis.call('HSET', K_CFG, 'rcur', '0')
    return false
  end
  local got = redis.call('HMGET', K_CFG, 'pbin', 'pargv')
  redis.call('UNLINK', K_LZ)
  if n > 0 then redis.call('RENAME', K_LZN, K_LZ) end
  LZ_SK[K_LZ] = nil
  redis.call('HSET', K_CFG, 'bin', got[1], unpack(cmsgpack.unpack(got[2])))
  redis.call('HDEL', K_CFG, 'pbin', 'pargv', 'rcur')
  LZC, LZP = cfg_parse(got[1]), false
  return true
end
-- LZ.step walks about n more lz members into lzn (ZSCAN COUNT n from cfg 'rcur'), switching when the walk
-- is complete. Only while a rescoring is under way (LZ.pending). Returns whether it switched.
-- Complexity: O(n log W) (about n ZADDs); the switch O(knobs) (ZCARD, UNLINK and RENAME are O(1)).
function LZ.step(n)
  local P = LZ.pending()
  local got = redis.call('ZSCAN', K_LZ, redis.call('HGET', K_CFG, 'rcur') or '0', 'COUNT', n)
  local members, kv = {}, got[2]
  for j = 1, #kv, 2 do members[#members + 1] = kv[j] end
  LZ.zadd(K_LZN, P, members)
  if got[1] == '0' then return LZ.switch() end
  redis.call('HSET', K_CFG, 'rcur', got[1])
  return false
end
-- LZ.tick: a small step of a rescoring under way (RESCORE_TICK members) at the end of a writing call, so
-- a rescoring whose PutPool caller died is finished by the pool's traffic.
function LZ.tick()
  if LZ.pending() then LZ.step(RESCORE_TICK) end
end
-- BULK_FMT: bulk_unpack's formats by record format and count (at most 128 per record format), built
-- once per library load: a library's module-level state outlives the call, unlike an EVAL script's.
local BULK_FMT = {}
-- bulk_unpack: fields of fixed-width records, one struct.unpack call per 128 records (Lua stack bound).
-- rec: format of the fields read from one record (no '>'); skip: bytes skipped between records
-- (with skip > 0, one call per record: struct's 'x' is slower than separate calls).
local function bulk_unpack(s, from, n, rec, per, skip, out)
  out = out or {}
  if skip > 0 then
    local f, w = '>' .. rec, struct.size('>' .. rec) + skip
    if per == 1 then
      for i = 1, n do out[i] = struct.unpack(f, s, from + (i - 1) * w) end
    else
      for i = 0, n - 1 do
        local v = {struct.unpack(f, s, from + i * w)}
        for j = 1, per do out[i * per + j] = v[j] end
      end
    end
    return out
  end
  local i = 0
  while i < n do
    local k = n - i
    if k > 128 then k = 128 end
    local fkey = rec .. k
    local fmt = BULK_FMT[fkey]
    if not fmt then
      fmt = '>' .. string.rep(rec, k)
      BULK_FMT[fkey] = fmt
    end
    local v = {struct.unpack(fmt, s, from)}
    if i == 0 and k == n then return v end
    local b = i * per
    for j = 1, k * per do out[b + j] = v[j] end
    from = v[k * per + 1] + skip
    i = i + k
  end
  return out
end
-- wid_lt: a < b in byte order (memcmp, then length: wz's and the memory store's order). Lua's own string
-- `<` uses strcoll, i.e. the server's locale, so it is not used for worker ids.
local function wid_lt(a, b)
  if a == b then return false end
  local n = #a
  if #b < n then n = #b end
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
-- wid_chunks returns the chunks c0..c1 of directory R that may hold worker wid's ranks (or the point where
-- they would go): c0 the last chunk whose first worker id sorts before wid (else the first), c1 the last of
-- the chunks after it that start with wid (a worker's run may span chunks). A binary search of the first
-- worker ids, O(log chunks) comparisons; no chunk is read.
local function wid_chunks(R, wid)
  local c0, lo, hi = 1, 1, R.k
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if wid_lt(R.fw[mid], wid) then c0, lo = mid, mid + 1 else hi = mid - 1 end
  end
  local c1 = c0
  while c1 < R.k and R.fw[c1 + 1] == wid do c1 = c1 + 1 end
  return c0, c1
end
-- rcol returns field values of every candidate (fmt/size: field format and width at byte offset off);
-- memoized with the directory like rslots (read-only for callers).
local function rcol(off, fmt, size)
  local R = rch_all()
  local ck = off .. fmt
  if not R.cols then R.cols = {} end
  if R.cols[ck] then return R.cols[ck] end
  local out = {}
  for c = 1, R.k do
    local C = R.ch[c]
    if C.n > 0 then
      local v = bulk_unpack(C.s, C.rb + off, C.n, fmt, 1, RW - size)
      local b = R.st[c]
      for j = 1, C.n do out[b + j] = v[j] end
    end
  end
  R.cols[ck] = out
  return out
end
-- rslots returns every candidate's slot (SL[i], i = 1..n) and rlive slot -> roster index (1-based) of every
-- candidate: tables memoized with the directory and filled on demand, one chunk's candidates at a time
-- (a lazy __index). Built whole, as they were, they cost O(candidates) in the first route after every
-- roster change — a registration, a removal, an engine restart clearing a rank — ~3 M instructions at
-- 4,096 candidates when one chunk had changed (docs/PERFORMANCE.md "Roster changes at 4,096 workers").
-- What makes them cheap to rebuild is where each slot's chunk is, kept per pool across roster changes:
-- SLOTC[K_ROSTER].m, slot -> chunk id (the map holds one era of the pool). A chunk is immutable under its
-- id (roster writes make chunks under fresh ids), and a chunk registers its slots there once per map
-- generation (C.sg) when a route reads it to place a slot (locate) or with every chunk (slotmap), only
-- while it is a chunk of the current roster; so for the current roster the latest registration of a slot
-- names the one chunk that holds it, and a slot mapped to an id the roster does not have (R.cpos) is
-- looked up again. A roster change then costs O(chunks) cheap steps and O(CH) per chunk a route meets that
-- is new since the last (a cold VM after a restart or failover: the chunks its routes meet, found through
-- the slots' workers). Bounded: a map grown past 2 * candidates + SLOTC_SLACK entries (the slots of
-- cleared ranks and removed workers stay) starts a new generation, which the chunks register into again.
local rslots, rlive
do   -- (a block, as gc_paced's)
  local SLOTC, SLOTC_SLACK = {}, 4096
  local function chunk_slots(C)
    if not C.slots then C.slots = C.n > 0 and bulk_unpack(C.s, 5, C.n, 'I4', 1, 0) or {} end
    return C.slots
  end
  -- pmap returns the pool's map (a new generation when it grew past its bound or the era changed) and
  -- makes R.cpos, R's chunk positions by chunk id (O(chunks); no chunk is read).
  -- A chunk's key in the map is its id, a number (ch_key's decimal string was a third of a cold call's
  -- Lua, and the id's packed bytes still a string per chunk); a map holds one era of the pool (a pool
  -- deleted and recreated numbers its chunks and slots again), so a new era starts a new generation.
  local function pmap(R)
    local P = SLOTC[K_ROSTER]
    if not P or P.era ~= R.era or P.n > 2 * R.n + SLOTC_SLACK then
      P = {g = (P and P.g or 0) + 1, n = 0, m = {}, era = R.era}
      SLOTC[K_ROSTER] = P
    end
    if not R.cpos then
      local cpos, cid = {}, R.cid
      for c = 1, R.k do cpos[cid[c]] = c end
      R.cpos = cpos
    end
    return P
  end
  -- register maps chunk c's slots to its key in P, once per generation (C.sg).
  local function register(P, R, c)
    local C = rch(c)
    if C.sg ~= P.g then
      local v, key, m = chunk_slots(C), R.cid[c], P.m
      for j = 1, C.n do m[v[j]] = key end
      C.sg, P.n = P.g, P.n + C.n
    end
  end
  -- slotmap registers every chunk of R (one MGET of those not memoized: rch_all); R.sg then says that a
  -- slot the map does not place in R is not a candidate.
  local function slotmap(R)
    local P = pmap(R)
    if R.sg ~= P.g then
      rch_all()
      for c = 1, R.k do register(P, R, c) end
      R.sg = P.g
    end
    return P
  end
  -- locate returns slot s's chunk in R, or nil when s is not a candidate. A slot the map does not place
  -- (a cold VM after a restart or failover, a new library, a chunk written since) is looked up by its
  -- worker: fence field 'w<slot>' (new_slot writes it; a slot belongs to one worker for its whole life)
  -- names the worker, wid_chunks the one or two chunks its ranks can be in, and only those are read and
  -- registered. Reading every chunk to place one slot cost the first route on a cold VM 14 M instructions
  -- at 4,096 workers (~4 ms; docs/PERFORMANCE.md "Fourteenth session"). Without a hint (a slot made by an
  -- older build of this layout) every chunk is registered, as before.
  local function locate(R, s)
    local P = pmap(R)
    local key = P.m[s]
    local c = key and R.cpos[key]
    if c or R.sg == P.g then return c end
    local wid = K_FENCE and R.k > 0 and redis.call('HGET', K_FENCE, 'w' .. istr(s))
    if wid then
      local c0, c1 = wid_chunks(R, wid)
      for q = c0, c1 do register(P, R, q) end
    else
      slotmap(R)
    end
    key = P.m[s]
    return key and R.cpos[key]
  end
  rslots = function()
    local R = ros()
    if not R.slots then
      R.slots = setmetatable({}, {__index = function(t, i)
        if i < 1 or i > R.n then return nil end
        local c, j = rloc(i)
        local v, b = chunk_slots(rch(c)), R.st[c]
        for q = 1, R.cn[c] do t[b + q] = v[q] end
        return v[j]
      end})
    end
    return R.slots
  end
  -- chunk_lpos: chunk C's slot -> position within it (1-based), memoized with the chunk: chunks are
  -- immutable under their ids and outlive roster changes, so a new roster's map does not fill whole chunks
  -- again (that fill was a quarter of the Lua of the first route after a roster change at 4,096 workers).
  local function chunk_lpos(C)
    if not C.lpos then
      local v, m = chunk_slots(C), {}
      for j = 1, C.n do m[v[j]] = j end
      C.lpos = m
    end
    return C.lpos
  end
  -- rlive: slot -> roster index, filled one slot at a time (locate, chunk_lpos); slots found not to be
  -- candidates are remembered apart (out: the table's values must stay numbers or nil, callers test
  -- `~= nil`).
  rlive = function()
    local R = ros()
    if not R.live then
      local out = {}
      R.live = setmetatable({}, {__index = function(t, s)
        if out[s] then return nil end
        local c = locate(R, s)
        local j = c and chunk_lpos(rch(c))[s]
        if not j then out[s] = true; return nil end
        local i = R.st[c] + j
        t[s] = i
        return i
      end})
    end
    return R.live
  end
end
-- rfind_rid returns the index within chunk C of the record whose rank id is rid, or nil (an aligned
-- string.find of the packed rank id in the records area).
local function rfind_rid(C, key)
  local base = C.rb + ROFF.RID
  local from = base
  while true do
    local p = string.find(C.s, key, from, true)
    if not p or p >= C.str then return nil end
    if (p - base) % RW == 0 then return (p - base) / RW + 1 end
    from = p + 1
  end
end
-- rid_index returns the roster index (1-based) of rank id rid, or nil (the rank is gone): every chunk.
local function rid_index(rid)
  local R = rch_all()
  local key = struct.pack('>I4', rid)
  for c = 1, R.k do
    local j = rfind_rid(R.ch[c], key)
    if j then return R.st[c] + j end
  end
  return nil
end
-- rid_locate returns the roster index (1-based) of rank id rid, or nil, trying index hint first: a lease
-- remembers where its rank stood when booked. The hinted chunk is searched (O(CH): a registration since
-- the booking shifts indices but rarely moves a rank out of its chunk), then its two neighbours (a split
-- moves half a chunk to a new one), and only then every chunk (rid_index; memoized chunks make that a
-- string.find per chunk). Rank ids are unique in the roster, so a match is the rank's only position.
local function rid_locate(rid, hint)
  local R = ros()
  if hint and hint >= 1 and hint <= R.n then
    local key = struct.pack('>I4', rid)
    local c0, j = rloc(hint)
    local C = rch(c0)
    if j <= C.n and struct.unpack('>I4', C.s, C.rb + (j - 1) * RW + ROFF.RID) == rid then return hint end
    for _, c in ipairs({c0, c0 + 1, c0 - 1}) do
      if c >= 1 and c <= R.k then
        local k = rfind_rid(rch(c), key)
        if k then return R.st[c] + k end
      end
    end
  end
  return rid_index(rid)
end
-- Loads memo (MEMO.lv): route's parsed loads column (LV: 3 numbers per candidate), kept across calls under
-- a loads stamp: the per-pool counter sc 'lvs', one HINCRBY per writing call. Every call that writes loads
-- first calls lv_touch, which takes a NEW stamp before any write (a call aborted later leaves a stamp no
-- memo has) and moves the memo, if this node holds one for the old stamp (the new one − 1), to the new
-- stamp; the call then applies each write to the memo too (lv_set), with the very numbers it writes to
-- Redis. A route whose stamp finds a memo of the right size reads no loads from Redis (lv_all + unpack of
-- the whole column: ~500 µs at 4,096 ranks). Roster changes (roster_replace) drop the memo.
-- Never reused: a counter that starts (HINCRBY answers 1: a new pool, or one deleted and recreated, or a
-- flushed server) is moved to the server's TIME in µs, above every stamp an earlier pool of that name took
-- (a call takes more than 1 µs, so no counter outruns the clock). Until 2026-12-02 'lvs' held TIME ‖ a
-- counter (e.g. '1764657600.123456.45', written with HGET + TIME + HINCRBY + HSET on every writing call); such a value
-- is not an integer, so HINCRBY refuses it (redis.pcall) and the counter restarts at TIME µs the same way.
-- Routers of that build, still running in a rolling upgrade, read 'lvs' as their stamp too: every write of
-- this build changes it, so their memos miss, and theirs are never integers, so this build's miss too.
-- A memo is whole (full: every candidate's three numbers, from lv_all) or partial (route's fast path: the
-- candidates it read so far, each filled on first use from its loads chunk: lv_partial, flat or in pages).
-- A partial memo carried from call to call under consecutive stamps keeps the loads of the candidates
-- decisions keep meeting (the holders of hot prefixes, the head of lz), so a steady-state route and done
-- read none of them from Redis: each lv_set writes its exact numbers into the memo, and nothing else writes
-- loads.
-- MEMO.lv: loads key -> {n = stamp, m = column or pages (a large partial memo), N = candidates,
-- full = true|nil}, one entry per pool
-- (MEMO.n_lv of them).
local function lv_memo_set(e)
  local had = MEMO.lv[K_LD] ~= nil
  if e and not had then
    if MEMO.n_lv >= MEMO.cap then MEMO.lv, MEMO.n_lv = {}, 0 end
    MEMO.n_lv = MEMO.n_lv + 1
  elseif had and not e then
    MEMO.n_lv = MEMO.n_lv - 1
  end
  MEMO.lv[K_LD] = e
end
local function lv_touch()
  if LVW ~= nil then return LVW end
  local n = redis.pcall('HINCRBY', K_SC, 'lvs', '1')
  if type(n) ~= 'number' or n == 1 then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('HSET', K_SC, 'lvs', string.format('%.0f', n))
  end
  LVS = n
  local e = MEMO.lv[K_LD]
  if e and e.n == n - 1 then e.n = n; LVW = e.m   -- this call's writes keep it exact under the new stamp
  else lv_memo_set(nil); LVW = false end
  return LVW
end
-- lv_memo_get returns the loads memo entry for the current stamp and n candidates, or nil, and the stamp.
local function lv_memo_get(n)
  if LVS == nil then LVS = redis.call('HGET', K_SC, 'lvs') end
  local stamp = tonumber(LVS or '')
  if not stamp then return nil, nil end
  local e = MEMO.lv[K_LD]
  if e and e.n == stamp and e.N == n then return e, stamp end
  return nil, stamp
end
-- lv_memo_adopt installs memo entry e (made by this call under the current stamp): when this call has
-- already taken its stamp (lv_touch), its later loads writes must reach e too, so e becomes LVW.
local function lv_memo_adopt(e)
  lv_memo_set(e)
  if LVW ~= nil then LVW = e.m end
end
-- lv_memo_put memoizes m, the whole loads column of n candidates, under stamp.
local function lv_memo_put(stamp, m, n) lv_memo_adopt({n = stamp, m = m, N = n, full = true}) end
-- lv_ckey returns the loads key of roster chunk c (memoized in the parsed roster: R.lk).
local function lv_ckey(c)
  local R = ROS
  local lk = R.lk
  if not lk then lk = {}; R.lk = lk end
  local k = lk[c]
  if not k then k = K_LD .. ':' .. R.cid[c]; lk[c] = k end
  return k
end
-- lv_all returns every candidate's loads as one string (24 bytes each, candidate order): one MGET per 256
-- chunks; a missing or mis-sized chunk reads as zero loads, and then the second result is false (those
-- zeros are not lv's bytes, so they must not enter the loads memo: ld_add trusts its entries as bytes).
local function lv_all()
  local R = ros()
  local parts, exact = {}, true
  for from = 1, R.k, 256 do
    local to = math.min(R.k, from + 255)
    local keys = {}
    for c = from, to do keys[#keys + 1] = lv_ckey(c) end
    local got = redis.call('MGET', unpack(keys))
    for c = from, to do
      local v = got[c - from + 1]
      if not v or #v ~= 24 * R.cn[c] then v, exact = string.rep(zl(), R.cn[c]), false end
      parts[c] = v
    end
  end
  return table.concat(parts), exact
end
-- lv_at returns the loads key of candidate i and the first and last byte offsets of its 24 bytes there,
-- as strings (istr).
local function lv_at(i)
  local c, j = rloc(i)
  return lv_ckey(c), istr((j - 1) * 24), istr((j - 1) * 24 + 23)
end
-- lv_from returns candidate i's loads read from its chunk's whole loads string, one GET per chunk per
-- cache table (chunk -> string): a reader of several candidates' loads (route's lazy LV) pays one call
-- per chunk instead of one GETRANGE per candidate. Zero loads when the string is too short for i, as
-- ld_add's GETRANGE (24 bytes exactly when the string holds i's).
local function lv_from(i, cache)
  local c, j = rloc(i)
  local s = cache[c]
  if not s then s = redis.call('GET', lv_ckey(c)) or ''; cache[c] = s end
  local o = (j - 1) * 24
  if #s < o + 24 then return 0, 0, 0, false end
  local p, d, r = struct.unpack('>ddd', s, o + 1)
  return p, d, r, true
end
-- A partial loads memo of n ≤ LV_PAGE candidates is one flat column read through LV_PARTIAL; a larger one
-- is paged: {paged = true, [b] = page} with page b (b = i − 1 − (i − 1) % LV_PAGE) holding candidates
-- b + 1..b + LV_PAGE, candidate i's three numbers at keys 3q + 1..3q + 3 (q = (i − 1) % LV_PAGE), read by route
-- through a per-call view (LV_VIEW). Why pages: the memo fills as candidates are first met, sparsely, so its
-- keys live in a table's hash part, and Lua 5.1 rehashes a table whole at every power of two; one flat memo
-- of 3 × 4,096 numbers charged its last doublings (8,192 → 16,384 nodes, up to 1.4 M instructions) to
-- whichever route call crossed them (PERFORMANCE.md "Ninth session"). A page never holds more than
-- 3 × LV_PAGE numbers. Why not always: the view costs ~4 % more instructions per decision at 64 candidates
-- (a function call per candidate a route touches), where a flat memo's doublings stay under ~0.15 M.
local LV_PAGE = 256
-- LV_PARTIAL: the metatable of a flat partial loads memo: a missing entry j (candidate i's three numbers at
-- 3i-2..3i) is read from i's loads chunk and kept, unless the chunk is too short to hold i (zero loads,
-- read again on each use: ld_add treats that candidate as having no loads bytes).
local LV_PARTIAL = {__index = function(t, j)
  local i = math.floor((j + 2) / 3)
  if not LVC then LVC = {} end
  local p, d, r, held = lv_from(i, LVC)
  if not held then return 0 end
  t[3 * i - 2], t[3 * i - 1], t[3 * i] = p, d, r
  return rawget(t, j)
end}
-- lv_pget returns paged memo m's loads of candidate i (nil when it holds none).
local function lv_pget(m, i)
  local q = (i - 1) % LV_PAGE
  local pg = m[i - 1 - q]
  if not pg then return nil end
  local o = 3 * q
  local p = pg[o + 1]
  if p == nil then return nil end
  return p, pg[o + 2], pg[o + 3]
end
-- lv_pset writes candidate i's loads into paged memo m.
local function lv_pset(m, i, p, d, r)
  local q = (i - 1) % LV_PAGE
  local b = i - 1 - q
  local pg = m[b]
  if not pg then pg = {}; m[b] = pg end
  local o = 3 * q
  pg[o + 1], pg[o + 2], pg[o + 3] = p, d, r
end
-- LV_VIEW: the metatable of route's view of this call's paged memo (LVP), a flat column as every other LV
-- (LV[3i-2..3i] = candidate i's three numbers): a missing entry is taken from the memo, else read as
-- LV_PARTIAL reads it and kept in the memo. The view holds only the candidates this call touched.
local LV_VIEW = {__index = function(t, j)
  local i = (j + 2 - (j + 2) % 3) / 3
  local p, d, r = lv_pget(LVP, i)
  if p == nil then
    if not LVC then LVC = {} end
    local held
    p, d, r, held = lv_from(i, LVC)
    if not held then return 0 end
    lv_pset(LVP, i, p, d, r)
  end
  t[3 * i - 2], t[3 * i - 1], t[3 * i] = p, d, r
  return rawget(t, j)
end}
-- lv_partial returns the current stamp's partial loads memo for n candidates (a new, empty one when there is
-- none) as route reads it: the flat column itself, or a view of the paged memo. A pool with no loads stamp
-- yet gets a memo of this call's only (filled the same way, memoized nowhere).
local function lv_partial(e, stamp, n)
  local m
  if stamp and e then
    m = e.m
  else
    if n > LV_PAGE then m = {paged = true} else m = setmetatable({}, LV_PARTIAL) end
    if stamp then lv_memo_adopt({n = stamp, m = m, N = n}) end
  end
  if not rawget(m, 'paged') then return m end
  LVP, LVV = m, setmetatable({}, LV_VIEW)
  return LVV
end
-- lv_mget returns memo m's loads of candidate i (a whole column or a paged memo; nil when it holds none).
local function lv_mget(m, i)
  if rawget(m, 'paged') then return lv_pget(m, i) end
  local p = rawget(m, 3 * i - 2)
  if p == nil then return nil end
  return p, rawget(m, 3 * i - 1), rawget(m, 3 * i)
end
-- lv_mset writes candidate i's loads into memo m, and into route's view when it reads m.
local function lv_mset(m, i, p, d, r)
  if rawget(m, 'paged') then
    lv_pset(m, i, p, d, r)
    if LVV and LVP == m then LVV[3 * i - 2], LVV[3 * i - 1], LVV[3 * i] = p, d, r end
  else
    m[3 * i - 2], m[3 * i - 1], m[3 * i] = p, d, r
  end
end
-- lv_set writes candidate i's loads (its chunk's loads string, and this call's memo) and moves its lz member
-- to the new load (LZ.move: the load order is maintained here and nowhere else for loads changes). old: the
-- 24 bytes lv holds for i when the caller just read them (else one GETRANGE); ck: i's candidate key when the
-- caller has it (a lease records it; else LZ.rck from the roster).
local function lv_set(i, p, d, r, old, ck)
  local m = lv_touch()
  local k, from, to = lv_at(i)
  if not old and m then   -- the memo's entries are lv's bytes exactly (filled only from them or by lv_set)
    local p0, d0, r0 = lv_mget(m, i)
    if p0 then old = struct.pack('>ddd', p0, d0, r0) end
  end
  old = old or redis.call('GETRANGE', k, from, to)
  local new = struct.pack('>ddd', p, d, r)
  redis.call('SETRANGE', k, from, new)
  if m then lv_mset(m, i, p, d, r) end
  if #old == 24 and old ~= new then
    if LZ_KEPT then LZ.move(LZ.fresh(ck, i) or LZ.rck(i), old, new) else lease_encodings() end
  end
end
-- lv_replaced drops the memo before loads move (a roster change).
local function lv_replaced()
  lv_touch()
  lv_memo_set(nil)
  LVW = false
end
-- ld_add: add to one candidate's loads (prefill tokens, decode blocks, requests); ck as lv_set's.
local function ld_add(i, a, b, c, ck)
  local m = lv_touch()
  local p, d, r
  if m then p, d, r = lv_mget(m, i) end
  if p then   -- the memo holds i's loads (lv_set packs them back into lv's old bytes)
    return lv_set(i, p + a, d + b, r + c, nil, ck)
  end
  local v = redis.call('GETRANGE', lv_at(i))
  if #v ~= 24 then return lv_set(i, a, b, c, v, ck) end
  local p0, d0, r0 = struct.unpack('>ddd', v)
  lv_set(i, p0 + a, d0 + b, r0 + c, v, ck)
end

-- Roster writes. A candidate while rewriting: {slot, rid, rank, mnbt, tkv, kve, wid, url, loads (24 bytes)}.
-- chunk_encode packs cands[a..b] as a chunk string (ranks of one worker share their strings).
local function chunk_encode(cands, a, b)
  local sl, recs, strs = {}, {}, {}
  local soff, lw, lu, lo = 0, nil, nil, 0
  for i = a, b do
    local c = cands[i]
    if c[7] ~= lw or c[8] ~= lu then
      lw, lu, lo = c[7], c[8], soff
      strs[#strs + 1] = c[7] .. c[8]
      soff = soff + #c[7] + #c[8]
    end
    sl[#sl + 1] = struct.pack('>I4', c[1])
    recs[#recs + 1] = struct.pack(RREC, c[1], c[2], c[3], c[4], c[5], c[6], lo, #c[7], lo + #c[7], #c[8])
  end
  return struct.pack('>I4', b - a + 1) .. table.concat(sl) .. table.concat(recs) .. table.concat(strs)
end
-- chunk_decode appends chunk C's candidates, with their loads from lv (a chunk's loads string), to out.
local function chunk_decode(C, lv, out)
  if #lv ~= 24 * C.n then lv = nil end
  for j = 1, C.n do
    local slot, rid, rank, mnbt, tkv, kve, wo, wl, uo, ul = struct.unpack(RREC, C.s, C.rb + (j - 1) * RW)
    out[#out + 1] = {slot, rid, rank, mnbt, tkv, kve, string.sub(C.s, C.str + wo, C.str + wo + wl - 1),
      string.sub(C.s, C.str + uo, C.str + uo + ul - 1), lv and string.sub(lv, 24 * j - 23, 24 * j) or zl()}
  end
  return out
end
-- LZ.chunk_members appends the lz members of directory R's chunk c (its candidates, their loads read from
-- the chunk's loads key) to out and returns it.
function LZ.chunk_members(R, c, out)
  local cands = chunk_decode(rch(c), redis.call('GET', K_LD .. ':' .. R.cid[c]) or '', {})
  for _, m in ipairs(LZ.of(cands)) do out[#out + 1] = m end
  return out
end
-- LZ.build starts keeping the pool's load orders ("Load orders only where a route may walk"): lz and lp
-- (and any lzn) emptied, then every candidate's member added from the roster chunks and their loads, and
-- cfg 'lzk' set. O(W) Lua and one ZADD per 256 members: called once per pool, when a registration takes it
-- past S ranks (W ≤ S + that worker's dp: every registration before it left at most S).
function LZ.build()
  redis.call('DEL', K_LZ, K_LP, K_LZN)
  LZ_KEPT = true
  local R = ros()
  local members = {}
  for c = 1, R.k do LZ.chunk_members(R, c, members) end
  LZ.add(members)
  redis.call('HSET', K_CFG, 'lzk', '1')
end
-- chunk_new writes cands[a..b] as a new chunk (fresh id; roster and loads keys) and returns its directory
-- entry {cid, n, fw, C}.
local function chunk_new(cands, a, b)
  local cid = redis.call('HINCRBY', K_SC, 'rcid', 1)
  local s = chunk_encode(cands, a, b)
  local lv = {}
  for i = a, b do lv[#lv + 1] = cands[i][9] end
  redis.call('SET', K_ROSTER .. ':' .. cid, s)
  redis.call('SET', K_LD .. ':' .. cid, table.concat(lv))
  return {cid = cid, n = b - a + 1, fw = cands[a][7], C = chunk_parse(s)}
end
-- chunk_drop deletes chunk c of directory R (roster and loads keys) and forgets its memo.
local function chunk_drop(R, c)
  redis.call('DEL', K_ROSTER .. ':' .. R.cid[c], K_LD .. ':' .. R.cid[c])
  local mk = ch_key(R, c)
  if MEMO.ch[mk] then MEMO.ch[mk], MEMO.n_ch = nil, MEMO.n_ch - 1 end
end
-- chunks_new cuts cands[a..b] into ceil(count/CH) chunks of balanced sizes, appended to list.
local function chunks_new(cands, a, b, list)
  local cnt = b - a + 1
  if cnt <= 0 then return list end
  local m = math.ceil(cnt / CH)
  local from = a
  for q = 1, m do
    local to = a - 1 + math.floor(cnt * q / m)
    list[#list + 1] = chunk_new(cands, from, to)
    from = to + 1
  end
  return list
end
-- dir_entry is a directory entry's bytes.
local function dir_entry(cid, n, fw) return struct.pack('>I4I4I2', cid, n, #fw) .. fw end
-- dir_publish makes R (complete: ds, era, arrays) the roster: SET ro (or DEL when empty), a new roster
-- stamp, and the memo of R under it.
local function dir_publish(R)
  if R.k == 0 then
    redis.call('DEL', K_ROSTER)
    redis.call('HDEL', K_SC, 'rv')
    ROS = ros_empty()
    return
  end
  redis.call('SET', K_ROSTER, R.ds)
  local stamp = new_stamp()
  redis.call('HSET', K_SC, 'rv', stamp)
  ROS = R
  ros_memo(K_ROSTER .. '\0' .. stamp, R)
end
-- dir_splice writes the directory of R with its chunks a..b (b = a - 1: none) replaced by list (new
-- chunks {cid, n, fw, C} in order): unchanged entries are kept as byte ranges of the old directory string,
-- and the new directory takes over R's arrays, spliced in place: entries after b move only when the
-- number of chunks changes (a split, a new chunk, a merge), and their counts and offsets are shifted only
-- when those changed. The common registration (a worker spliced into a chunk with room) thus touches one
-- array entry and one prefix count per later chunk; copying every entry into fresh arrays had cost ~3 k
-- instructions per chunk, half of a registration's Lua at 4,096 workers, the one part that grew with the
-- pool. R is dead afterwards (its arrays are the new directory's): its memo entry is dropped. The new
-- chunks are memoized. O(W/CH) cheap steps at most.
local function dir_splice(R, a, b, list)
  local era = R.era ~= '' and R.era or new_stamp()
  local hdr = string.char(#era) .. era
  local K, nl = R.k, #list
  local delta = nl - (b - a + 1)
  local tot = K > 0 and (R.st[K] + R.cn[K]) or 0
  local off = (a > 1) and (R.off[a] or (#R.ds + 1)) or (#hdr + 1)   -- (an unchanged era: offsets before a stay)
  local n = (a > 1) and (R.st[a - 1] + R.cn[a - 1]) or 0
  local pre = (a > 1) and string.sub(R.ds, R.off[1], off - 1) or ''
  local rest, st1, off1 = '', nil, nil
  if b < K then rest, st1, off1 = string.sub(R.ds, R.off[b + 1]), R.st[b + 1], R.off[b + 1] end
  if R.mkey and MEMO.ros[R.mkey] == R then MEMO.ros[R.mkey], MEMO.n_ros = nil, MEMO.n_ros - 1 end
  local cid, cn, st, fw, of, ch = R.cid, R.cn, R.st, R.fw, R.off, R.ch
  if delta > 0 then   -- (ch has holes: chunks parsed lazily; hence no table.insert)
    for c = K, b + 1, -1 do
      local d = c + delta
      cid[d], cn[d], st[d], fw[d], of[d], ch[d] = cid[c], cn[c], st[c], fw[c], of[c], ch[c]
    end
  elseif delta < 0 then
    for c = b + 1, K do
      local d = c + delta
      cid[d], cn[d], st[d], fw[d], of[d], ch[d] = cid[c], cn[c], st[c], fw[c], of[c], ch[c]
    end
    for c = K + delta + 1, K do cid[c], cn[c], st[c], fw[c], of[c], ch[c] = nil, nil, nil, nil, nil, nil end
  end
  local N = {ds = '', era = era, k = K + delta, n = 0, cid = cid, cn = cn, st = st, fw = fw, off = of, ch = ch}
  local ents = {}
  for j, e in ipairs(list) do
    local k = a + j - 1
    local ent = dir_entry(e.cid, e.n, e.fw)
    ents[j] = ent
    cid[k], cn[k], st[k], fw[k], of[k], ch[k] = e.cid, e.n, n, e.fw, off, e.C
    n, off = n + e.n, off + #ent
    ch_memo(ch_key(N, k), e.C)
  end
  if st1 then
    local dn, doff = n - st1, off - off1
    if dn ~= 0 or doff ~= 0 then
      for c = a + nl, K + delta do st[c], of[c] = st[c] + dn, of[c] + doff end
    end
    n = n + tot - st1
  end
  N.n = n
  N.ds = hdr .. pre .. table.concat(ents) .. rest
  dir_publish(N)
end
-- The roster writers: roster_replace and its helpers, in a block so that the helpers are no locals of the
-- library's main chunk (an EVAL script of lib + an operation must stay under Lua's 200 locals).
local roster_replace
do
  -- ranks_of returns worker w's candidates (wid: its id), loads carried by rank id from old (rid -> loads).
  local function ranks_of(wid, w, old)
    local out = {}
    for r = 1, w and w[W.DP] or 0 do
      local rid = w[W.RIDS][r]
      out[r] = {w[W.SLOTS][r], rid, r - 1, w[W.MNBT], w[W.TKV], w[W.KVE], wid, w[W.URL], old[rid] or zl()}
    end
    return out
  end

  -- chunk_find returns how many candidates of chunk C sort before worker id wid (a binary search reading
  -- O(log CH) worker ids), and whether the next one is wid's.
  local function chunk_find(C, wid)
    local lo, hi = 0, C.n   -- answer in [lo, hi]
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)   -- candidate mid + 1
      local wo, wl = struct.unpack('>I4I4', C.s, C.rb + mid * RW + ROFF.WID)
      if wid_lt(string.sub(C.s, C.str + wo, C.str + wo + wl - 1), wid) then lo = mid + 1 else hi = mid end
    end
    if lo >= C.n then return lo, false end
    local wo, wl = struct.unpack('>I4I4', C.s, C.rb + lo * RW + ROFF.WID)
    return lo, string.sub(C.s, C.str + wo, C.str + wo + wl - 1) == wid
  end
  -- chunk_loads returns chunk c's loads (24 bytes per candidate, n of them; zeros when missing or short).
  local function chunk_loads(R, c, n)
    local lv = redis.call('GET', K_LD .. ':' .. R.cid[c]) or ''
    if #lv ~= 24 * n then lv = string.rep(zl(), n) end
    return lv
  end
  -- chunk_replace writes s (n candidates, first worker fw) and its loads lv as a new chunk in place of chunk
  -- c of R (a fresh id: a chunk is immutable under its own) and returns the new chunk's entry.
  local function chunk_replace(R, c, s, lv, n, fw)
    local cid = redis.call('HINCRBY', K_SC, 'rcid', 1)
    redis.call('SET', K_ROSTER .. ':' .. cid, s)
    redis.call('SET', K_LD .. ':' .. cid, lv)
    chunk_drop(R, c)
    return {cid = cid, n = n, fw = fw, C = chunk_parse(s)}
  end
  -- chunk_splice writes chunk c of R with a new worker's candidates (new, one worker) inserted after its
  -- first p, as a new chunk: slots and records spliced in, the worker's strings appended to the strings
  -- area (existing offsets are relative to its start), zero loads spliced into its loads. O(1) Lua work
  -- and O(chunk bytes) copying. Returns the new chunk's entry.
  local function chunk_splice(R, c, p, new)
    local C = rch(c)
    local n, s = C.n, C.s
    local soff = #s - C.str + 1
    local x1 = new[1]
    local sl, recs = {}, {}
    for r, x in ipairs(new) do
      sl[r] = struct.pack('>I4', x[1])
      recs[r] = struct.pack(RREC, x[1], x[2], x[3], x[4], x[5], x[6], soff, #x1[7], soff + #x1[7], #x1[8])
    end
    local out = struct.pack('>I4', n + #new) .. string.sub(s, 5, 4 + 4 * p) .. table.concat(sl) .. string.sub(s, 5 + 4 * p, 4 + 4 * n)
      .. string.sub(s, C.rb, C.rb + p * RW - 1) .. table.concat(recs) .. string.sub(s, C.rb + p * RW, C.str - 1)
      .. string.sub(s, C.str) .. x1[7] .. x1[8]
    local lv = chunk_loads(R, c, n)
    lv = string.sub(lv, 1, 24 * p) .. string.rep(zl(), #new) .. string.sub(lv, 24 * p + 1)
    return chunk_replace(R, c, out, lv, n + #new, (p == 0) and x1[7] or R.fw[c])
  end

  -- chunk_cut writes chunk c of R without its candidates p+1..q (one worker's ranks: a removal) as a new
  -- chunk: their slots, records and loads cut out, their strings entry cut from the strings area (a worker's
  -- ranks share one) and the string offsets after it shifted by its length. O(CH) copies of records, none
  -- decoded: decoding and re-encoding the chunk (the general path) were half of a removal's Lua at 4,096
  -- workers, and most of its garbage (the collector's sweep then landed in the same call: up to 2.9 M
  -- instructions). Returns the new chunk's entry and the removed candidates (as chunk_decode makes them), or
  -- nil when the ranks do not share one strings entry (the caller re-encodes).
  local function chunk_cut(R, c, p, q)
    local C = rch(c)
    local n, s = C.n, C.s
    local lv = chunk_loads(R, c, n)
    local gone, lo, len = {}, nil, nil
    for j = p + 1, q do
      local slot, rid, rank, mnbt, tkv, kve, wo, wl, uo, ul = struct.unpack(RREC, s, C.rb + (j - 1) * RW)
      if not lo then
        if uo ~= wo + wl then return nil end
        lo, len = wo, wl + ul
      elseif wo ~= lo or wl + ul ~= len then
        return nil
      end
      gone[#gone + 1] = {slot, rid, rank, mnbt, tkv, kve, string.sub(s, C.str + wo, C.str + wo + wl - 1),
        string.sub(s, C.str + uo, C.str + uo + ul - 1), string.sub(lv, 24 * j - 23, 24 * j)}
    end
    local recs, fw = {}, R.fw[c]
    for j = 1, n do
      if j <= p or j > q then
        local at = C.rb + (j - 1) * RW
        local wo, wl, uo, ul = struct.unpack('>I4I4I4I4', s, at + ROFF.WID)
        if p == 0 and j == q + 1 then fw = string.sub(s, C.str + wo, C.str + wo + wl - 1) end
        if wo > lo then
          recs[#recs + 1] = string.sub(s, at, at + ROFF.WID - 1) .. struct.pack('>I4I4I4I4', wo - len, wl, uo - len, ul)
        else
          recs[#recs + 1] = string.sub(s, at, at + RW - 1)
        end
      end
    end
    local m = n - (q - p)
    local out = struct.pack('>I4', m) .. string.sub(s, 5, 4 + 4 * p) .. string.sub(s, 5 + 4 * q, 4 + 4 * n)
      .. table.concat(recs) .. string.sub(s, C.str, C.str + lo - 1) .. string.sub(s, C.str + lo + len)
    return chunk_replace(R, c, out, string.sub(lv, 1, 24 * p) .. string.sub(lv, 24 * q + 1), m, fw), gone
  end

  -- roster_replace makes worker wid's ranks in the roster those of w (its record; nil: none, the worker
  -- left), keeping candidate order and carrying loads by rank id (new rank ids start at 0). It finds the
  -- worker's run (or insertion point) by a binary search of the chunks' first worker ids (chunk c0), then
  -- within c0 (chunk_find). A new worker whose ranks fit in c0 is spliced into it (chunk_splice: the common
  -- registration); one that does not fit, before or after all of c0, gets chunks of its own and c0 stays
  -- as it is. A removal within one chunk is cut out of it (chunk_cut) unless the general path would merge
  -- the rest with the next chunk. Otherwise (a known worker: other removals, dp or spec change; or a
  -- split) the chunks holding the run are decoded, spliced and written back as new chunks of at most CH,
  -- merged with the next chunk when under CH/2 and both fit. The directory is rewritten by dir_splice.
  -- O(CH + dp) Lua work plus O(W/CH) cheap directory steps, whatever the pool's size.
  roster_replace = function(wid, w)
    local R = ros()
    lv_replaced()
    local c0, c1 = wid_chunks(R, wid)
    if R.k > 0 and c1 == c0 and w and w[W.DP] > 0 then
      local p, known = chunk_find(rch(c0), wid)
      if not known then
        local new = ranks_of(wid, w, {})
        -- (each return joins the new ranks to the zero-load group, O(dp·log W); falling through to the
        -- general case below adds them there)
        if R.cn[c0] + #new <= CH then LZ.add(LZ.of(new)); return dir_splice(R, c0, c0, {chunk_splice(R, c0, p, new)}) end
        if p == R.cn[c0] then LZ.add(LZ.of(new)); return dir_splice(R, c0 + 1, c0, chunks_new(new, 1, #new, {})) end
        if p == 0 then LZ.add(LZ.of(new)); return dir_splice(R, c0, c0 - 1, chunks_new(new, 1, #new, {})) end
      end
    end
    if not w and R.k > 0 and c1 == c0 then
      -- a removal within one chunk that keeps candidates: cut them out (chunk_cut), unless the chunk is left
      -- under CH/2 with a successor it fits with, which the general path below merges
      local C = rch(c0)
      local p, known = chunk_find(C, wid)
      if known then
        local q = p + 1
        while q < C.n do
          local wo, wl = struct.unpack('>I4I4', C.s, C.rb + q * RW + ROFF.WID)
          if string.sub(C.s, C.str + wo, C.str + wo + wl - 1) ~= wid then break end
          q = q + 1
        end
        local m = C.n - (q - p)
        if m > 0 and (m >= CH / 2 or c0 == R.k or m + R.cn[c0 + 1] > CH) then
          local e, gone = chunk_cut(R, c0, p, q)
          if e then
            LZ.remove(LZ.of(gone))
            return dir_splice(R, c0, c0, {e})
          end
        end
      end
    end
    local cands = {}
    if R.k > 0 then
      local keys = {}
      for c = c0, c1 do keys[#keys + 1] = K_LD .. ':' .. R.cid[c] end
      local lvs = redis.call('MGET', unpack(keys))
      for c = c0, c1 do chunk_decode(rch(c), lvs[c - c0 + 1] or '', cands) end
    end
    local a, top = 1, #cands + 1   -- the run is cands[a..b-1]: a by binary search (cands are in worker-id order;
    while a < top do               -- a linear scan of byte-wise comparisons was a quarter of a chunk split's Lua)
      local mid = math.floor((a + top) / 2)
      if wid_lt(cands[mid][7], wid) then a = mid + 1 else top = mid end
    end
    local b = a
    while b <= #cands and cands[b][7] == wid do b = b + 1 end
    local oldl = {}
    for i = a, b - 1 do oldl[cands[i][2]] = cands[i][9] end
    local mine = ranks_of(wid, w, oldl)
    LZ.remove(LZ.of(cands, a, b - 1))   -- the worker's members out, its new ranks' in (loads carried)
    LZ.add(LZ.of(mine))
    local out = {}
    for i = 1, a - 1 do out[#out + 1] = cands[i] end
    for _, x in ipairs(mine) do out[#out + 1] = x end
    for i = b, #cands do out[#out + 1] = cands[i] end
    if #out > 0 and #out < CH / 2 and c1 < R.k and #out + R.cn[c1 + 1] <= CH then   -- absorb the next chunk
      c1 = c1 + 1
      chunk_decode(rch(c1), redis.call('GET', K_LD .. ':' .. R.cid[c1]) or '', out)
    end
    for c = c0, math.min(c1, R.k) do chunk_drop(R, c) end
    dir_splice(R, c0, math.min(c1, R.k), chunks_new(out, 1, #out, {}))
  end
end

-- end_lease releases a lease's remaining load and its session hold at time t (memory: endLease).
local function end_lease(id, l, t)
  local i = rid_locate(l[L.RID], l[L.IDX])
  if i then ld_add(i, 0 - l[L.PREFILL], 0 - l[L.DECODE], -1, l[L.CK]) end
  redis.call('HDEL', K_LS, id)
  redis.call('ZREM', K_LX, id)
  if l[L.SESSION] ~= '' then
    local sp = redis.call('HGET', K_SS, l[L.SESSION])
    if sp then
      local s = cmsgpack.unpack(sp)
      if s[S.GEN] == l[L.SGEN] and s[S.ACTIVE] > 0 then
        s[S.ACTIVE] = s[S.ACTIVE] - 1
        if s[S.ACTIVE] == 0 then
          s[S.IDLE] = t
          redis.call('ZADD', K_SY, t, l[L.SESSION])
        end
        redis.call('HSET', K_SS, l[L.SESSION], cmsgpack.pack(s))
      end
    end
  end
end

-- Leases' next expiry (MEMO.lx: lease-expiry key name -> ms, this Lua VM, across calls): a lower bound of
-- the earliest expiry in lx, so release_expired, which every route and lease call runs, skips its
-- ZRANGEBYSCORE while now is below it (nothing can have expired). Exact as long as every lease added to lx
-- passes lx_added (route's booking, a renewal): the bound only ever under-estimates (releases only raise
-- lx's minimum). Leases can reach lx otherwise: a router of another build on the same node (its library has
-- its own memo), keys moved to this node by cluster resharding or RESTORE. So the bound never lies more
-- than LX_RECHECK_MS ahead of the now it was computed at: such a lease is released at most that late,
-- and a pool's steady traffic costs one ZRANGEBYSCORE and one ZRANGE per LX_RECHECK_MS instead of one
-- ZRANGEBYSCORE per call (two per decision).
local LX_RECHECK_MS = 1000
local function lx_added(expiry)
  local m = MEMO.lx[K_LX]
  if m and expiry < m then MEMO.lx[K_LX] = expiry end
end
-- release_listed ends the leases of request ids (a route's coalesced `done`s, route.lua RELS) as lease.lua's
-- 'done' does at now: memory.go releaseListed. An id with no lease is skipped.
local function release_listed(ids, now)
  for _, id in ipairs(ids) do
    local lp = redis.call('HGET', K_LS, id)
    if lp then end_lease(id, cmsgpack.unpack(lp), now) end
  end
end
-- release_expired releases every lease whose expiry is at or before now (ms; nows: the same as the
-- caller's ARGV string when it has one, so Redis need not format the number), then, when listed is given,
-- the leases it names (release_listed: one upvalue for route.lua's module, which is at Lua 5.1's limit).
local function release_expired(now, nows, listed)
  if listed then
    release_expired(now, nows)
    return release_listed(listed, now)
  end
  local m = MEMO.lx[K_LX]
  if m and now < m then return end
  local ids = redis.call('ZRANGEBYSCORE', K_LX, '-inf', nows or now)
  for _, id in ipairs(ids) do
    local lp = redis.call('HGET', K_LS, id)
    if lp then
      local l = cmsgpack.unpack(lp)
      end_lease(id, l, l[L.EXPIRY])
    else
      redis.call('ZREM', K_LX, id)
    end
  end
  local first = redis.call('ZRANGE', K_LX, 0, 0, 'WITHSCORES')[2]
  m = now + LX_RECHECK_MS
  if first and tonumber(first) < m then m = tonumber(first) end
  if MEMO.lx[K_LX] == nil then
    if MEMO.n_lx >= MEMO.cap then MEMO.lx, MEMO.n_lx = {}, 0 end
    MEMO.n_lx = MEMO.n_lx + 1
  end
  MEMO.lx[K_LX] = m
end

-- The event index entry's codec (an e:<n> field's value): a header of ENT.HDR bytes (parent seq 8 ‖
-- is_child 1), then one ENT.REC-byte record per holding slot, ENT.FMT = {slot u32, word i32} with
-- word = children·ENT.TIERS + tiers (tiers: bit 0 device, 1 host, 2 disk; children signed). Positions are
-- 1-based string offsets: ENT.FIRST is the first record's; a record starts with its slot (ENT.SLOT_FMT,
-- ENT.SLOT_LEN bytes),
-- and ENT.TIER_BYTE (0-based) is the word's last byte, whose value % ENT.TIERS is the tiers (big-endian:
-- children·8 only adds multiples of 8 to it). A sequence hash is SEQ_LEN bytes (a query passes them concatenated).
local SEQ_LEN = 8
local ENT = {HDR = 9, FIRST = 10, REC = 8, FMT = '>I4i4', SLOT_FMT = '>I4', SLOT_LEN = 4, WORD_FMT = '>i4', TIER_BYTE = 7, TIERS = 8}
-- The soft index entry's codec (an s:<n> field's value): SOFT.REC-byte records SOFT.FMT = {slot u32,
-- expiry_ms f64}, the slot's SOFT.SLOT_LEN bytes (SOFT.SLOT_FMT) first, then the expiry (SOFT.EXP_FMT).
local SOFT = {REC = 12, FMT = '>I4d', SLOT_FMT = '>I4', SLOT_LEN = 4, EXP_FMT = '>d'}

-- Event index entries, parsed: {hdr = parent..flag | nil, recs = {{slot, tiers, children}...}, dirty}.
local function eparse(s)
  local recs = {}
  if not s then return nil, recs end
  local n = (#s - ENT.HDR) / ENT.REC
  local off = ENT.FIRST
  for i = 1, n do
    local slot, w = struct.unpack(ENT.FMT, s, off)
    local t = w % ENT.TIERS
    recs[i] = {slot, t, (w - t) / ENT.TIERS}
    off = off + ENT.REC
  end
  return string.sub(s, 1, ENT.HDR), recs
end

local function eget(seq)
  if not EC then EC = {} end
  local e = EC[seq]
  if not e then
    local hdr, recs = eparse(redis.call('HGET', ebucket(seq), efield(seq)) or nil)
    e = {hdr = hdr, recs = recs, dirty = false}
    EC[seq] = e
  end
  return e
end
local function rfind(e, slot)
  for i, r in ipairs(e.recs) do if r[1] == slot then return r, i end end
  return nil
end
local function rdel(e, slot)
  local _, i = rfind(e, slot)
  if i then table.remove(e.recs, i); e.dirty = true end
end
local function eflush()
  for seq, e in pairs(EC or {}) do
    if e.dirty then
      if #e.recs == 0 then
        en_add(-redis.call('HDEL', ebucket(seq), efield(seq)))
      else
        local parts = {e.hdr}
        for i, r in ipairs(e.recs) do parts[i + 1] = struct.pack(ENT.FMT, r[1], r[3] * ENT.TIERS + r[2]) end
        en_add(redis.call('HSET', ebucket(seq), efield(seq), table.concat(parts)))
      end
    end
  end
  EC = nil
  en_flush()
end

-- Counter deltas (held, orphans, non-device) per slot (CNT), flushed at the end.
local function cnt_add(kind, slot, d)
  if d ~= 0 then
    if not CNT then CNT = {h = {}, o = {}, n = {}} end
    CNT[kind][slot] = (CNT[kind][slot] or 0) + d
  end
end
-- cnt_take returns slot's pending delta of counter kind ('h', 'o', 'n'; 0: none) and drops it from
-- cnt_flush: for a caller that writes that counter itself.
local function cnt_take(kind, slot)
  local t = CNT and CNT[kind]
  local d = t and t[slot] or 0
  if d ~= 0 then t[slot] = 0 end
  return d
end
-- cnt_hincr adds d to slot's field of counter hash k, deleting a field back at 0.
local function cnt_hincr(k, slot, d)
  local f = istr(slot)
  if d ~= 0 and redis.call('HINCRBY', k, f, istr(d)) == 0 then redis.call('HDEL', k, f) end
end
local function cnt_flush()
  if not CNT then return end
  for slot, d in pairs(CNT.h) do if d ~= 0 then redis.call('HINCRBY', K_SC, 'h' .. istr(slot), istr(d)) end end
  for slot, d in pairs(CNT.o) do cnt_hincr(K_ORPH, slot, d) end
  for slot, d in pairs(CNT.n) do cnt_hincr(K_ND, slot, d) end
  CNT = nil
end

-- reclaim: bounded deferred deletion of dead slots' entries, then up to softn expired soft entries. The
-- budget is RECLAIM_CALLS Redis calls of the walk (the calls are its cost: each is an HSCAN of a bucket, a
-- DEL of one, or an event-index entry read or written, ~10-30 k instructions): a bucket g:<slot>:<n> holds
-- about a 256th of the slot's blocks, ~1 entry at 4,096 ranks and ~256 for a 65,536-block engine, so
-- neither buckets nor entries bound a call's time (16 entries cost 40-90 calls, up to 2 M instructions at
-- 4,096 workers; docs/PERFORMANCE.md "Fourteenth session"). The head dead slot's current bucket is walked
-- with HSCAN from a cursor kept in sc ('rc' bucket, 'rs' where); at cursor 0 the bucket is deleted (unless
-- its first page was empty: no such key) and the next one starts. A page holds more than the budget when
-- the bucket is listpack-encoded (HSCAN returns such a bucket whole, up to hash-max-listpack-entries): only
-- the budget's worth of its entries are done, and 'rp' ('<slot>:<bucket>:<cursor>:<done>') says how many
-- of the page at that cursor are, so the next call reads the same page (a fixed COUNT, RECLAIM_PAGE; a dead
-- slot's buckets are not written) and goes on after them. A build without 'rp' (same layout) resumes at the
-- cursor and does those entries again, which is harmless: HSCAN may return an entry twice anyway (a rehash
-- between calls), and removing a slot from an entry is idempotent (rfind finds nothing the second time).
local reclaim
do   -- (a block: reclaim_entry is no local of the library's main chunk)
  -- reclaim_entry removes dead slot islot from event-index entry seq, and its tier-0 link record from the
  -- entry's parent (flag byte 9 of the header), and returns the Redis calls that cost: a read of each entry
  -- not yet read this call, a write (at eflush) of each entry it dirties first.
  local function reclaim_entry(seq, islot)
    local cost = (EC and EC[seq]) and 0 or 1
    local e = eget(seq)
    if rfind(e, islot) then
      if not e.dirty then cost = cost + 1 end
      rdel(e, islot)
      if e.hdr and string.byte(e.hdr, 9) == 1 then
        local ps = string.sub(e.hdr, 1, 8)
        if not EC[ps] then cost = cost + 1 end
        local pe = eget(ps)
        local pr = rfind(pe, islot)
        if pr and pr[2] == 0 then
          if not pe.dirty then cost = cost + 1 end
          rdel(pe, islot)
        end
      end
    end
    return cost
  end
  reclaim = function(now, softn)
    local left = RECLAIM_CALLS
    -- The walk's position (the head dead slot dslot, its bucket count nbd, bucket cur, HSCAN cursor, entries
    -- of the page done) is read once and written back once per call (sc 'rc', 'rs', 'rp'), not per bucket:
    -- at 4,096 ranks a bucket holds ~1 entry, and reading and writing it per bucket was 4 of the ~6 commands
    -- an entry cost.
    local dslot, nbd, cur, cursor, skip
    while left > 0 do
      if not dslot then
        dslot = redis.call('LINDEX', K_DEAD, 0)
        if not dslot then break end
        local at = redis.call('HMGET', K_SC, 'rc', 'rs', 'rp')
        cur, cursor, skip = tonumber(at[1] or '0'), '0', 0
        nbd = tonumber(redis.call('HGET', K_FENCE, 'gn' .. dslot) or '') or NB_G   -- its engine-map buckets (gparams)
        -- rs is "<slot>:<bucket>:<cursor>": a cursor is only resumed in the bucket it came from (a build that
        -- reclaimed whole buckets, during a rolling upgrade, moves rc without knowing rs).
        local rs_at = dslot .. ':' .. cur .. ':'
        if at[2] and string.sub(at[2], 1, #rs_at) == rs_at then cursor = string.sub(at[2], #rs_at + 1) end
        local rp_at = rs_at .. cursor .. ':'
        if at[3] and string.sub(at[3], 1, #rp_at) == rp_at then skip = tonumber(string.sub(at[3], #rp_at + 1)) or 0 end
      end
      local key = K_G .. dslot .. ':' .. cur
      local page = redis.call('HSCAN', key, cursor, 'COUNT', RECLAIM_PAGE)
      left = left - 1
      local kv = page[2]
      local islot = tonumber(dslot)
      local total = #kv / 2
      local upto = skip
      while upto < total and left > 0 do
        upto = upto + 1
        left = left - reclaim_entry(kv[2 * upto], islot)
      end
      if upto < total then
        skip = upto   -- the rest of this page next time
      elseif page[1] ~= '0' then
        cursor, skip = page[1], 0
      else
        if total > 0 or cursor ~= '0' then   -- (a first page that is empty and last: the bucket does not exist)
          redis.call('DEL', key)
          left = left - 1
        end
        cur, cursor, skip = cur + 1, '0', 0
        if cur >= nbd then
          redis.call('LPOP', K_DEAD)
          redis.call('HDEL', K_SC, 'rc', 'rs', 'rp', 'h' .. dslot)
          redis.call('HDEL', K_FENCE, 'gn' .. dslot, 'w' .. dslot)
          redis.call('HDEL', K_ORPH, dslot)
          redis.call('HDEL', K_ND, dslot)
          dslot = nil
        end
      end
    end
    if dslot then   -- (read in this call, so its position moved)
      local rs = dslot .. ':' .. cur .. ':' .. cursor
      redis.call('HSET', K_SC, 'rc', cur, 'rs', rs, 'rp', rs .. ':' .. skip)
    end
    eflush()
    if softn > 0 then
      local due = redis.call('ZRANGEBYSCORE', K_SX, '-inf', num(now), 'LIMIT', '0', istr(softn))
      for _, m in ipairs(due) do
        local seq, slot = string.sub(m, 1, 8), struct.unpack('>I4', m, 9)
        local b = sbucket(seq)
        local s = redis.call('HGET', b, seq)
        if s then
          local parts = {}
          for off = 1, #s, 12 do
            local sl = struct.unpack('>I4', s, off)
            if sl ~= slot then parts[#parts + 1] = string.sub(s, off, off + 11) end
          end
          if #parts == 0 then redis.call('HDEL', b, seq) else redis.call('HSET', b, seq, table.concat(parts)) end
        end
        redis.call('ZREM', K_SX, m)
      end
    end
  end
end

-- sweep_sessions deletes up to SESS_SWEEP idle session bindings expired at now under ttl ms (memory:
-- sweepSessions). Lookups already ignore expired bindings; this only reclaims their memory.
local function sweep_sessions(now, ttl)
  local due = redis.call('ZRANGEBYSCORE', K_SY, '-inf', num(now - ttl), 'LIMIT', '0', istr(SESS_SWEEP))
  for _, id in ipairs(due) do
    local sp = redis.call('HGET', K_SS, id)
    if sp then
      local s = cmsgpack.unpack(sp)
      if s[S.ACTIVE] == 0 and now >= s[S.IDLE] + ttl then redis.call('HDEL', K_SS, id) end
    end
    redis.call('ZREM', K_SY, id)
  end
end

-- seen_set records worker wid's last heartbeat/event at t ms: seen (the value) and sz (the order).
local function seen_set(wid, t)
  redis.call('HSET', K_SEEN, wid, t)
  redis.call('ZADD', K_SZ, t, wid)
end

-- new_slot: a fresh slot id for a rank of worker wid; its engine map starts at NB_G buckets and may grow
-- (gparams); fence field 'w<slot>' names its worker for rlive's locate (deleted with 'gn<slot>' when
-- reclaim is done with the slot).
local function new_slot(wid)
  local slot = redis.call('HINCRBY', K_SC, 'slot', 1)
  redis.call('HSET', K_FENCE, 'gn' .. slot, istr(NB_G), 'w' .. slot, wid)
  return slot
end

-- TTFT cost model and calibration (statestore/ttft.go TTFTCalibration, ttft_route.go), operation by
-- operation: only + - * / and comparisons on doubles, so every result is Go's bit for bit (Lua 5.1 does not
-- fuse a multiply-add). A state is {prefill_rate, decode_coeff, p11, p12, p22, samples}; r1, r2 are the
-- pool's reference coefficients (ttft_prefill_rate, ttft_decode_coeff; 0 = the defaults). One table, not
-- locals: an EVAL script of lib + route must stay under Lua's 200 locals.
local TT = {FORGET = 0.98, P0 = 10, PMAX = 1000, STEP = 2, FMIN = 1.0 / 64, FMAX = 64, RATE = 40000, DC = 1e-6} -- luacheck: ignore 241 (read by the operations)
function TT.finite(v) return v - v == 0 end
function TT.ref(cfg)
  local r1, r2 = cfg.tpr, cfg.tdc
  if r1 == 0 then r1 = TT.RATE end
  if r2 == 0 then r2 = TT.DC end
  return r1, r2
end
function TT.clampu(u)
  if u ~= u or u - u ~= 0 then
    if u > 0 then return TT.FMAX end
    if u < 0 then return TT.FMIN end
    return 1
  elseif u < TT.FMIN then return TT.FMIN
  elseif u > TT.FMAX then return TT.FMAX end
  return u
end
function TT.clamp(r1, r2, rate, dc)
  local u1, u2 = TT.clampu(r1 / rate), TT.clampu(dc / r2)
  return r1 / u1, u2 * r2
end
function TT.init(r1, r2, rate, dc)
  rate, dc = TT.clamp(r1, r2, rate, dc)
  return {rate, dc, TT.P0, 0, TT.P0, 0}
end
function TT.boundp(p)
  local lo = TT.P0 / 1e6
  if p ~= p then return TT.P0 elseif p < lo then return lo elseif p > TT.PMAX then return TT.PMAX end
  return p
end
function TT.bounded(v, u)
  local lo, hi = u / TT.STEP, u * TT.STEP
  if v ~= v or v < lo then return lo elseif v > hi then return hi end
  return v
end
-- TT.update is TTFTCalibration.Update: the new state, or nil when the sample is not used.
function TT.update(r1, r2, s, x1, x2, y)
  local fin = TT.finite
  if not fin(y) or not fin(x1) or not fin(x2) or y <= 0 or x1 < 0 or x2 < 0 or x1 + x2 == 0 then return nil end
  local p11, p12, p22 = s[3], s[4], s[5]
  if not fin(p11) or not fin(p12) or not fin(p22) or p11 <= 0 or p22 <= 0 then p11, p12, p22 = TT.P0, 0, TT.P0 end
  local z1 = x1 / r1 / y
  local z2 = (x2 * r2) / y
  if not fin(z1) or not fin(z2) then return nil end
  local kr, kd = TT.clamp(r1, r2, s[1], s[2])
  local u1, u2 = r1 / kr, kd / r2
  local e = 1 - (u1 * z1 + u2 * z2)
  if e > 1 then e = 1 elseif e < -1 then e = -1 end
  local pz1 = p11 * z1 + p12 * z2
  local pz2 = p12 * z1 + p22 * z2
  local d = TT.FORGET + (z1 * pz1 + z2 * pz2)
  if not (d > 0) or not fin(d) then return nil end -- luacheck: ignore 581 (NaN must fail)
  local k1, k2 = pz1 / d, pz2 / d
  local n1 = TT.clampu(TT.bounded(u1 + k1 * e, u1))
  local n2 = TT.clampu(TT.bounded(u2 + k2 * e, u2))
  local q11 = (p11 - k1 * pz1) / TT.FORGET
  local q12 = (p12 - k1 * pz2) / TT.FORGET
  local q22 = (p22 - k2 * pz2) / TT.FORGET
  q11, q22 = TT.boundp(q11), TT.boundp(q22)
  if not fin(q12) or q12 * q12 >= q11 * q22 then q12 = 0 end
  return {r1 / n1, n2 * r2, q11, q12, q22, s[6] + 1}
end
-- TT.state reads a packed state (nil: absent).
function TT.state(b)
  if not b or #b ~= 48 then return nil end
  return {struct.unpack('>dddddd', b)}
end
function TT.pack(s) return struct.pack('>dddddd', s[1], s[2], s[3], s[4], s[5], s[6]) end
-- TT.pool is the pool's fit (Init of the reference while absent).
function TT.pool(r1, r2, b) return TT.state(b) or TT.init(r1, r2, r1, r2) end
-- TT.coeffs returns every roster candidate's coefficients, C[2i-1] prefill rate and C[2i] decode coeff
-- (EffectiveTTFT: the rank's own fit once it has a sample, else the pool's). One HGETALL of tc; with a
-- range a..b of roster indices (route.lua's explain pages) only those candidates', one HMGET.
function TT.coeffs(cfg, n, a, b)
  local r1, r2 = TT.ref(cfg)
  local st, rids = {}, {}
  if a then
    local f = {'p'}
    for i = a, b do
      local _, rid = rrec(i)
      rids[i] = rid
      f[#f + 1] = '' .. rid
    end
    local got = redis.call('HMGET', K_TC, unpack(f))
    for k, name in ipairs(f) do st[name] = got[k] or nil end
  else
    local kv = redis.call('HGETALL', K_TC)
    for i = 1, #kv, 2 do st[kv[i]] = kv[i + 1] end
    if n > 0 then rids = rcol(ROFF.RID, 'I4', 4) end
    a, b = 1, n
  end
  local pool = TT.pool(r1, r2, st.p)
  local C = {}
  for i = a, b do
    local s = TT.state(st['' .. rids[i]])
    if s and s[6] > 0 then C[2 * i - 1], C[2 * i] = s[1], s[2]
    else C[2 * i - 1], C[2 * i] = pool[1], pool[2] end
  end
  return C
end
-- TT.calibrate is TTFTCalibration.Observe on rank rid and the pool for one first token (prefill_done).
function TT.calibrate(cfg, rid, x1, x2, y)
  local r1, r2 = TT.ref(cfg)
  local got = redis.call('HMGET', K_TC, '' .. rid, 'p')
  local w, pool = TT.state(got[1]), TT.pool(r1, r2, got[2])
  if not w or w[6] <= 0 then w = TT.init(r1, r2, pool[1], pool[2]) end
  local nw = TT.update(r1, r2, w, x1, x2, y)
  if not nw then return end
  local np = TT.update(r1, r2, pool, x1, x2, y) or pool
  redis.call('HSET', K_TC, '' .. rid, TT.pack(nw), 'p', TT.pack(np))
end
