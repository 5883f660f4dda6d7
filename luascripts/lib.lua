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
--                    'bin': every knob as a big-endian f64, CFG_FIELDS order
--   2 ro      STRING packed roster: candidates in (worker id bytes, dp rank) order. u32 n, then the n
--                    slots (u32 each, one column for a single bulk unpack), then n fixed RW-byte records (RREC: slot u32, rid u32, rank u32, max_num_batched_tokens f64,
--                    total_kv_blocks f64, kv_events i8 (-1/0/1), worker id offset u32, length u32, url
--                    offset u32, length u32), then the strings area (offsets are relative to its start).
--   3 wk      HASH   worker id -> cmsgpack {url, dp, tkv, mnbt, kve, rids{}, slots{}}
--   4 seen    HASH   worker id -> last heartbeat/event, ms
--   5 lv      STRING loads, 24 bytes per roster candidate, same order: prefill tokens, decode blocks,
--                    requests (f64 each; a rank id is alive iff it is in the roster)
--   6 fence   HASH   "e"..rid epoch, "i"..rid last event id (20 zero-padded digits), "g"..rid degraded
--   7 sc      HASH   counters: "slot", "rid", "sgen", "rc" (reclaim cursor), "h"..slot held blocks, "rv" the
--                    roster's stamp (see ros), "rvn" its counter, "lvs" the loads' stamp (lv_touch), "lvn" its counter
--   8 orph    HASH   slot -> held blocks whose parent is not held (only non-zero entries)
--   9 nd      HASH   slot -> held blocks without the device tier (only non-zero entries)
--  10 dead    LIST   index slots awaiting incremental reclamation
--  11 ls      HASH   request id -> cmsgpack lease {rid, prefill, decode, expiry_ms, session, session_gen}
--  12 lx      ZSET   request id scored by lease expiry, ms
--  13 ss      HASH   session id -> cmsgpack {rid, wid, gen, active, idle_at_ms}
--  14 sx      ZSET   soft entry (seq 8 bytes .. slot 4 bytes) scored by expiry, ms
--  15 e:      prefix of the event index buckets  e:<n>, n = last 14 bits of the sequence hash:
--                    HASH seq's first 7 bytes -> parent seq(8) .. is_child(1) .. {slot u32, children·8 + tiers i32}*
--                    (tiers: bit 0 device, 1 host, 2 disk; children: held children of that slot, signed)
--  16 g:      prefix of the engine maps g:<slot>:<n>, n = last byte of the engine hash:
--                    HASH engine hash's first 7 bytes -> seq(8 bytes)
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
--                    a load group. Kept by lv_set / roster_insert / roster_rebuild, rescored by put_pool.
--  23 lc      HASH   packed load (24 bytes) -> members of lz with that load (a group's size; no zero entries)
--  24 sz      ZSET   worker id scored by its last heartbeat/event, ms (layout 3): seen's values as an order, so
--                    route finds the workers dead under worker_ttl_ms from its head (seen_set keeps both)
--  25 lp      ZSET   candidate key (LZ.ck) scored by its active prefill tokens (layout 3): the credit decay's
--                    reference, min prefill over the eligible ranks, is read from its head (kept with lz)
-- Bucket suffixes are the only strings appended in Lua; every key stays under the pool's hash tag.

-- LAYOUT: the key-layout version (SPEC §8 "Layout version"; luascripts.Layout in Go, checked by a test).
-- Written as cfg field 'layout' by put_pool; every operation meeting a pool whose cfg holds another
-- version (or none: layout 1, before versions were recorded) answers {'layout_mismatch', found}.
local LAYOUT = '3'

local K_CFG, K_ROSTER, K_WK, K_SEEN, K_LD, K_FENCE, K_SC, K_ORPH, K_ND, K_DEAD, K_LS, K_LX, K_SS, K_SX, K_E, K_G, K_S, K_WZ
local K_HC, K_HU, K_SY, K_LZ, K_LC, K_SZ, K_LP
local ROS, EC, CNT   -- per-call caches (roster, event-index entries, counter deltas), reset by bind
local LVW, LVSTAMP   -- this call's loads memo and stamp after its first loads write (lv_touch); LVW false: none
local LZC            -- this call's pool knobs for lz scores (LZ.knobs), nil until read

-- bind starts a call: the pool's key names (KEYS as statestore.PoolKeys builds them) and fresh caches.
local function bind(keys)
  K_CFG, K_ROSTER, K_WK, K_SEEN, K_LD, K_FENCE, K_SC, K_ORPH, K_ND, K_DEAD, K_LS, K_LX, K_SS, K_SX, K_E, K_G, K_S, K_WZ =
    keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7], keys[8], keys[9], keys[10], keys[11], keys[12],
    keys[13], keys[14], keys[15], keys[16], keys[17], keys[18]
  K_HC, K_HU, K_SY, K_LZ, K_LC, K_SZ, K_LP = keys[19], keys[20], keys[21], keys[22], keys[23], keys[24], keys[25]
  ROS, EC, CNT = nil, {}, {h = {}, o = {}, n = {}}
  LVW, LVSTAMP, LZC = nil, nil, nil
end

-- layout_reply is the reply for a pool whose cfg records layout v (nil: none recorded).
local function layout_reply(v) return {'layout_mismatch', v or '1'} end

-- pool_check returns nil when the pool exists in this layout, else the operation's reply
-- ({'unknown_pool'} or {'layout_mismatch', found}). One HGET on the path every operation takes.
local function pool_check()
  local v = redis.call('HGET', K_CFG, 'layout')
  if v == LAYOUT then return nil end
  if v or redis.call('EXISTS', K_CFG) == 1 then return layout_reply(v) end
  return {'unknown_pool'}
end

-- NB_E: 16384 event buckets keep each listpack near 61 entries at 1 M entries (every HGET scans its bucket
-- linearly): ~15-20 % less Redis time per route decision than 4096 (~245 entries) for +1.3 B per entry.
local NB_E, NB_G, NB_S = 16384, 256, 1024
local RECLAIM_BUCKETS = 8      -- engine-map buckets of dead slots reclaimed per call
local SOFT_SWEEP = 256         -- expired soft entries swept per call
local SESS_SWEEP = 32          -- expired idle session bindings reclaimed per route call
local SESS_CAP = 262144        -- live session bindings per pool (statestore.MaxSessionsPerPool)

local function ebucket(seq) local a, b = string.byte(seq, 7, 8); return K_E .. ((a * 256 + b) % NB_E) end
local function sbucket(seq) local a, b = string.byte(seq, 7, 8); return K_S .. ((a * 256 + b) % NB_S) end
local function gkey(slot, engine) return K_G .. slot .. ':' .. string.byte(engine, 8) end
-- Fields drop the hash's last byte, which the bucket number already fixes (e: its low 14 bits select the
-- bucket; g: its last byte does), so a field is 7 bytes and still unique within its bucket.
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
-- MEMO.cfg: cfg 'bin' -> knobs table; MEMO.ros: roster string -> parsed roster (ros()); MEMO.n_*: sizes.
local MEMO = {cap = 64, cfg = {}, n_cfg = 0, ros = {}, n_ros = 0, lv = {}, n_lv = 0}

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
-- exist or was written by another layout (pool_check's replies). One HMGET (the packed knobs and the
-- layout version).
local function cfg_get()
  local got = redis.call('HMGET', K_CFG, 'bin', 'layout')
  local b, v = got[1], got[2]
  if v ~= LAYOUT then
    if v or b or redis.call('EXISTS', K_CFG) == 1 then return nil, layout_reply(v) end
    return nil, {'unknown_pool'}
  end
  return cfg_parse(b)
end

-- cfg_override returns the knobs with a route request's overrides applied: argv[first..] (the operation's
-- ARGV, a parameter: inside a Functions library ARGV is no global) holds one value per CFG_OVERRIDES knob,
-- in that order ('' = keep the pool's value). cfg itself is never written (it may be MEMO.cfg's shared
-- table): with an override, a copy is returned. Also returns the index of the next ARGV.
local function cfg_override(cfg, argv, first)
  local out = cfg
  for j, f in ipairs(CFG_OVERRIDES) do
    local a = argv[first + j - 1]
    if a ~= '' then
      if out == cfg then
        out = {}
        for k, v in pairs(cfg) do out[k] = v end
      end
      out[f] = tonumber(a)
    end
  end
  return out, first + #CFG_OVERRIDES
end


-- Records kept with cmsgpack (Lua arrays); these tables name their fields' indices (tables, not one
-- local per field: an EVAL script of lib + route must stay under Lua's 200 locals per function).
-- worker (wk): url, dp size, total_kv_blocks, max_num_batched_tokens, kv_events (-1 pool default/0/1),
-- rank ids {per dp rank}, index slots {per dp rank}
local W = {URL = 1, DP = 2, TKV = 3, MNBT = 4, KVE = 5, RIDS = 6, SLOTS = 7}
-- lease (ls): rank id, prefill tokens still booked, decode blocks, expiry ms, session id ('' none), the
-- session binding's generation, the rank's roster index when booked (a hint for rid_locate; absent in
-- leases booked before it was recorded), the rank's candidate key (LZ.ck: fixed for a rank id, so a
-- release moves its lz member without reading the roster; absent in leases of layout 2)
local L = {RID = 1, PREFILL = 2, DECODE = 3, EXPIRY = 4, SESSION = 5, SGEN = 6, IDX = 7, CK = 8}
-- session binding (ss): rank id, worker id, generation, active requests, idle since ms
local S = {RID = 1, WID = 2, GEN = 3, ACTIVE = 4, IDLE = 5}

-- Packed roster (KEYS[2]) and loads (KEYS[5]); see the key list above. RREC is one candidate's record,
-- RW its width; RO_* are byte offsets of its fields within the record (0-based).
local RREC, RW = '>I4I4I4ddbI4I4I4I4', 45
local ROFF = {RID = 4, MNBT = 12, TKV = 20, WID = 29}
-- Roster stamp: every roster write also writes sc field 'rv' = a stamp unique to that content (the
-- server's TIME in µs and a per-pool counter, so a pool deleted and recreated — the counter restarts —
-- or a flushed server never reuses a stamp), and ros() memoizes by key name + stamp + STRLEN instead of by
-- the content: a route then reads the roster with HGET + STRLEN, not a GET of the whole string (~270 KB
-- at 4,096 ranks: ~450 µs of Redis time on the busy box). Rosters without a stamp (written before it
-- existed) are memoized by content as before.
local function ros_memo(key, R)
  if MEMO.n_ros >= MEMO.cap then MEMO.ros, MEMO.n_ros = {}, 0 end
  MEMO.ros[key], MEMO.n_ros = R, MEMO.n_ros + 1
end
-- ros_written records a roster just written (s, non-empty): a new stamp, and the parsed form memoized
-- under it.
local function ros_written(s, n)
  local t = redis.call('TIME')
  local stamp = t[1] .. '.' .. t[2] .. '.' .. redis.call('HINCRBY', K_SC, 'rvn', 1)
  redis.call('HSET', K_SC, 'rv', stamp)
  ROS = {s = s, n = n, rb = 5 + 4 * n, str = 5 + 4 * n + n * RW}
  ros_memo(K_ROSTER .. '\0' .. stamp .. '\0' .. #s, ROS)
end
-- ros returns the parsed roster {s, n, rb (first record), str (strings area), slots (column, lazily),
-- live (slot -> index, lazily)}, memoized across calls by stamp (or by content).
local function ros()
  if not ROS then
    local stamp = redis.call('HGET', K_SC, 'rv')
    local key = nil
    if stamp then
      key = K_ROSTER .. '\0' .. stamp .. '\0' .. redis.call('STRLEN', K_ROSTER)
      ROS = MEMO.ros[key]
      if ROS then return ROS end
    end
    local s = redis.call('GET', K_ROSTER)
    if not s then ROS = {s = '', n = 0, rb = 5, str = 5}
    else
      ROS = MEMO.ros[s]
      if not ROS then
        local n = struct.unpack('>I4', s, 1)
        ROS = {s = s, n = n, rb = 5 + 4 * n, str = 5 + 4 * n + n * RW}
        ros_memo(key or s, ROS)
      end
    end
  end
  return ROS
end
-- rrec returns candidate i (1-based): slot, rid, rank, max_num_batched_tokens, total_kv_blocks, kv_events, wid, url.
local function rrec(i)
  local R = ROS
  local slot, rid, rank, mnbt, tkv, kve, wo, wl, uo, ul = struct.unpack(RREC, R.s, R.rb + (i - 1) * RW)
  return slot, rid, rank, mnbt, tkv, kve, string.sub(R.s, R.str + wo, R.str + wo + wl - 1), string.sub(R.s, R.str + uo, R.str + uo + ul - 1)
end
local function rwid(i)
  local R = ROS
  local wo, wl = struct.unpack('>I4I4', R.s, R.rb + (i - 1) * RW + ROFF.WID)
  return string.sub(R.s, R.str + wo, R.str + wo + wl - 1)
end
-- rnum returns candidate i's f64 field at record offset off (ROFF.MNBT, ROFF.TKV): one field, no column.
local function rnum(i, off)
  local R = ROS
  return (struct.unpack('>d', R.s, R.rb + (i - 1) * RW + off))
end

-- Load order (keys lz, lc; layout 3): route's sublinear selection reads it from the head (route.lua
-- fast_select; the memory store's memory_loadorder.go + memory_select.go, whose proof it follows).
-- A member is packed load (24 bytes, '>ddd': lv's bytes) ‖ candidate key LZ.ck; its score is LZ.score of
-- the load. Members with equal scores sort by their bytes, so the candidates with one exact load form one
-- contiguous run of lz ordered by candidate key = candidate order (a load group, its size in lc).
-- Maintained in one place per kind of write: lv_set (every loads change), roster_insert (zero-load
-- members), roster_rebuild (LZ.rebuild), put_pool (LZ.rescore after a scoring knob changed).
local LZ = {}
-- LZ.ck: the candidate key of (worker id, dp rank, index slot). Sorts like the candidate order (worker id
-- bytes, then rank): NUL in the id is escaped as \0\1 and the id ends with \0\0, so a prefix sorts first;
-- the slot after the rank never decides (a (worker, rank) pair is unique) but names the roster index
-- through rlive (LZ.index) without any search.
function LZ.ck(wid, rank, slot)
  return (string.gsub(wid, '%z', '\0\1')) .. '\0\0' .. struct.pack('>I4I4', rank, slot)
end
-- LZ.rck: candidate i's key (roster index, 1-based).
function LZ.rck(i)
  local R = ros()
  local slot, _, rank = struct.unpack('>I4I4I4', R.s, R.rb + (i - 1) * RW)
  return LZ.ck(rwid(i), rank, slot)
end
-- LZ.slot: the index slot named by member (or candidate key) m.
function LZ.slot(m) return (struct.unpack('>I4', m, #m - 3)) end
-- LZ.knobs: the pool's scoring knobs (cfg's packed 'bin', whatever its layout: migrate reads it too; once
-- per call).
function LZ.knobs()
  if not LZC then LZC = cfg_parse(redis.call('HGET', K_CFG, 'bin')) end
  return LZC
end
-- LZ.use: this call's scoring knobs are the pool's knobs c (a caller that already read them).
function LZ.use(c) LZC = c end
-- LZ.score: a load's key, memory_loadorder.go loadKey operation by operation (prefill_load_scale ·
-- (prefill / block_size) + decode blocks + decode_active_request_weight · requests).
function LZ.score(c, p, d, r) return c.pls * (p / c.bs) + d + c.rw * r end
-- LZ.move moves candidate key ck from load old to load new (24-byte strings, old ≠ new), and its lp
-- score when the prefill tokens changed.
function LZ.move(ck, old, new)
  redis.call('ZREM', K_LZ, old .. ck)
  if redis.call('HINCRBY', K_LC, old, -1) <= 0 then redis.call('HDEL', K_LC, old) end
  local p, d, r = struct.unpack('>ddd', new)
  redis.call('ZADD', K_LZ, LZ.score(LZ.knobs(), p, d, r), new .. ck)
  redis.call('HINCRBY', K_LC, new, 1)
  if string.sub(old, 1, 8) ~= string.sub(new, 1, 8) then redis.call('ZADD', K_LP, p, ck) end
end
-- LZ.add adds members (load ‖ key strings) to lz, their counts to lc and their prefill tokens to lp
-- (keys only: rescore re-adds lz alone): ZADD 256 at a time.
function LZ.add(members, rescore)
  local c, args, pargs, cnt = LZ.knobs(), {}, {}, {}
  for _, m in ipairs(members) do
    local l = string.sub(m, 1, 24)
    local p, d, r = struct.unpack('>ddd', l)
    args[#args + 1] = LZ.score(c, p, d, r)
    args[#args + 1] = m
    pargs[#pargs + 1] = p
    pargs[#pargs + 1] = string.sub(m, 25)
    cnt[l] = (cnt[l] or 0) + 1
    if #args >= 512 then
      redis.call('ZADD', K_LZ, unpack(args))
      if not rescore then redis.call('ZADD', K_LP, unpack(pargs)) end
      args, pargs = {}, {}
    end
  end
  if #args > 0 then
    redis.call('ZADD', K_LZ, unpack(args))
    if not rescore then redis.call('ZADD', K_LP, unpack(pargs)) end
  end
  for l, k in pairs(cnt) do redis.call('HINCRBY', K_LC, l, k) end
end
-- LZ.rescore recomputes every member's score after the scoring knobs changed (O(W log W), put_pool only).
function LZ.rescore()
  local all = redis.call('ZRANGE', K_LZ, 0, -1)
  redis.call('DEL', K_LZ, K_LC)
  LZ.add(all, true)
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
-- rcol returns field values of every candidate (fmt/size: field format and width at byte offset off).
local function rcol(off, fmt, size)
  local R = ros()
  if R.n == 0 then return {} end
  return bulk_unpack(R.s, R.rb + off, R.n, fmt, 1, RW - size)
end
-- rslots returns every candidate's slot (the slot column).
local function rslots()
  local R = ros()
  if R.n == 0 then return {} end
  if not R.slots then R.slots = bulk_unpack(R.s, 5, R.n, 'I4', 1, 0) end
  return R.slots
end
-- rlive returns slot -> roster index (1-based) of every candidate.
local function rlive()
  local R = ros()
  if not R.live then
    local live, sl = {}, rslots()
    for i = 1, R.n do live[sl[i]] = i end
    R.live = live
  end
  return R.live
end
-- rid_index returns the roster index (1-based) of rank id rid, or nil (the rank is gone).
local function rid_index(rid)
  local R = ros()
  local key = struct.pack('>I4', rid)
  local base = R.rb + ROFF.RID
  local from = base
  while true do
    local p = string.find(R.s, key, from, true)
    if not p or p >= R.str then return nil end
    if (p - base) % RW == 0 then return (p - base) / RW + 1 end
    from = p + 1
  end
end
-- slot_index returns the roster index (1-based) of the candidate with index slot `slot`, or nil: an aligned
-- search of the slot column (4 bytes per candidate, so ~11x fewer bytes than rid_index's records).
local function slot_index(slot)
  local R = ros()
  local key = struct.pack('>I4', slot)
  local from = 5
  while true do
    local p = string.find(R.s, key, from, true)
    if not p or p >= R.rb then return nil end
    if (p - 5) % 4 == 0 then return (p - 5) / 4 + 1 end
    from = p + 1
  end
end
-- rid_locate returns the roster index (1-based) of rank id rid, or nil, trying index hint first: a lease
-- remembers where its rank stood when booked and the roster only changes on registration and removal, so
-- the hint almost always holds. Without the roster parsed this costs two GETRANGEs (its count, the
-- hinted record's rank id) instead of reading the whole roster (O(W) bytes): release stays O(1) as the
-- pool grows. Rank ids are unique in the roster, so a matching record is the rank's only position.
local function rid_locate(rid, hint)
  if hint then
    if ROS then
      if hint >= 1 and hint <= ROS.n and struct.unpack('>I4', ROS.s, ROS.rb + (hint - 1) * RW + ROFF.RID) == rid then
        return hint
      end
    else
      local nb = redis.call('GETRANGE', K_ROSTER, 0, 3)
      if #nb == 4 then
        local n = struct.unpack('>I4', nb)
        if hint >= 1 and hint <= n then
          local off = 4 + 4 * n + (hint - 1) * RW + ROFF.RID   -- 0-based byte offset of the record's rank id
          local v = redis.call('GETRANGE', K_ROSTER, off, off + 3)
          if #v == 4 and struct.unpack('>I4', v) == rid then return hint end
        end
      end
    end
  end
  return rid_index(rid)
end
-- Loads memo (MEMO.lv): route's parsed loads column (LV: 3 numbers per candidate), kept across calls under
-- a loads stamp, sc field 'lvs' (server TIME µs ‖ per-pool counter 'lvn', so never reused). Every call that
-- writes lv first calls lv_touch, which writes a NEW stamp before any write (a call aborted later leaves
-- a stamp no memo has) and moves the memo, if this node holds one for the old stamp, to the new stamp;
-- the call then applies each write to the memo too (lv_set), with the very numbers it writes to Redis.
-- A route whose stamp finds a memo of the right size reads no loads from Redis (GET lv + unpack of the
-- whole column: ~500 µs at 4,096 ranks). Wholesale writes (roster_rebuild, roster_insert) drop the memo.
local function lv_key(stamp) return K_LD .. '\0' .. stamp end
local function lv_touch()
  if LVW ~= nil then return LVW end
  local old = redis.call('HGET', K_SC, 'lvs')
  local t = redis.call('TIME')
  local stamp = t[1] .. '.' .. t[2] .. '.' .. redis.call('HINCRBY', K_SC, 'lvn', 1)
  redis.call('HSET', K_SC, 'lvs', stamp)
  LVSTAMP = stamp
  local m = old and MEMO.lv[lv_key(old)] or false
  if m then MEMO.lv[lv_key(old)] = nil end
  MEMO.lv[lv_key(stamp)] = m or nil   -- (also clears any entry under the new stamp: belt and braces)
  LVW = m
  return m
end
-- lv_memo_get returns the memoized loads column for the current stamp (size 3·n) or nil, and the stamp.
local function lv_memo_get(n)
  local stamp = redis.call('HGET', K_SC, 'lvs')
  if not stamp then return nil, nil end
  local m = MEMO.lv[lv_key(stamp)]
  if m and #m == 3 * n then return m, stamp end
  return nil, stamp
end
local function lv_memo_put(stamp, m)
  if MEMO.n_lv >= MEMO.cap then MEMO.lv, MEMO.n_lv = {}, 0 end
  MEMO.lv[lv_key(stamp)], MEMO.n_lv = m, MEMO.n_lv + 1
end
-- lv_set writes candidate i's loads to lv (and to this call's memo) and moves its lz member to the new
-- load (LZ.move: the load order is maintained here and nowhere else for loads changes). old: the 24 bytes
-- lv holds for i when the caller just read them (else one GETRANGE); ck: i's candidate key when the caller
-- has it (a lease records it; else LZ.rck from the roster).
local function lv_set(i, p, d, r, old, ck)
  local m = lv_touch()
  local off = (i - 1) * 24
  old = old or redis.call('GETRANGE', K_LD, off, off + 23)
  local new = struct.pack('>ddd', p, d, r)
  redis.call('SETRANGE', K_LD, off, new)
  if m then m[3 * i - 2], m[3 * i - 1], m[3 * i] = p, d, r end
  if #old == 24 and old ~= new then LZ.move(ck or LZ.rck(i), old, new) end
end
-- lv_replaced drops the memo before lv is rewritten wholesale.
local function lv_replaced()
  lv_touch()
  MEMO.lv[lv_key(LVSTAMP)] = nil
  LVW = false
end
-- ld_read / ld_add: one candidate's loads (prefill tokens, decode blocks, requests); ck as lv_set's.
local function ld_read(i)
  local off = (i - 1) * 24
  local v = redis.call('GETRANGE', K_LD, off, off + 23)
  if #v ~= 24 then return 0, 0, 0 end
  return struct.unpack('>ddd', v)
end
local function ld_add(i, a, b, c, ck)
  local off = (i - 1) * 24
  local v = redis.call('GETRANGE', K_LD, off, off + 23)
  if #v ~= 24 then return lv_set(i, a, b, c, v, ck) end
  local p, d, r = struct.unpack('>ddd', v)
  lv_set(i, p + a, d + b, r + c, v, ck)
end

-- roster_rebuild writes the candidate list from wz + wk (wkc: optional cache of changed worker records),
-- carrying each surviving rank id's loads to its new position (new rank ids start at 0), and rebuilds
-- the load order (lz, lc) from them.
local function roster_rebuild(wkc)
  local old = ros()
  local lds = redis.call('GET', K_LD) or ''
  local oldl = {}
  for i = 1, old.n do
    local rid = struct.unpack('>I4', old.s, old.rb + (i - 1) * RW + ROFF.RID)
    oldl[rid] = string.sub(lds, (i - 1) * 24 + 1, i * 24)
  end
  lv_replaced()
  local ids = redis.call('ZRANGE', K_WZ, 0, -1)
  local recs, strs, lv, sl, lzm = {}, {}, {}, {}, {}
  local soff = 0
  for _, id in ipairs(ids) do
    local w = wkc and wkc[id]
    if not w then w = cmsgpack.unpack(redis.call('HGET', K_WK, id)) end
    for r = 1, w[W.DP] do
      local rid = w[W.RIDS][r]
      sl[#sl + 1] = struct.pack('>I4', w[W.SLOTS][r])
      recs[#recs + 1] = struct.pack(RREC, w[W.SLOTS][r], rid, r - 1, w[W.MNBT], w[W.TKV], w[W.KVE], soff, #id, soff + #id, #w[W.URL])
      strs[#strs + 1] = id .. w[W.URL]
      soff = soff + #id + #w[W.URL]
      local l = oldl[rid]
      if not l or #l ~= 24 then l = string.rep('\0', 24) end
      lv[#lv + 1] = l
      lzm[#lzm + 1] = l .. LZ.ck(id, r - 1, w[W.SLOTS][r])
    end
  end
  redis.call('DEL', K_LZ, K_LC, K_LP)
  LZ.add(lzm)
  if #recs == 0 then
    redis.call('DEL', K_ROSTER, K_LD)
    redis.call('HDEL', K_SC, 'rv')
    ROS = {s = '', n = 0, rb = 5, str = 5}
  else
    local n = #recs
    local s = struct.pack('>I4', n) .. table.concat(sl) .. table.concat(recs) .. table.concat(strs)
    redis.call('SET', K_ROSTER, s)
    redis.call('SET', K_LD, table.concat(lv))
    ros_written(s, n)
  end
end

-- roster_insert adds a NEW worker's ranks (w: its record, already in wz and wk) to the roster without
-- decoding it: the ranks go where wz's order puts them (before the first rank of the next worker in wz,
-- found by ZRANK/ZRANGE and the C-level slot_index search), records and slots are spliced in, the worker's
-- strings are appended to the strings area (existing offsets are relative to its start and stay valid),
-- and the loads string gets zero loads at the same position. Registration thus costs O(1) Lua work plus
-- O(roster bytes) of string copying (memcpy) instead of roster_rebuild's decode and re-encode of every
-- worker (4,096 registrations were quadratic in Lua work). Strings of removed workers are dropped by the
-- next roster_rebuild (removal and spec changes still rebuild). Falls back to roster_rebuild when the
-- loads string does not match the roster.
local function roster_insert(wid, w)
  local R = ros()
  if redis.call('STRLEN', K_LD) ~= 24 * R.n or w[W.DP] == 0 then return roster_rebuild({[wid] = w}) end
  lv_replaced()
  local p = R.n   -- candidates before the new ranks
  local k = redis.call('ZRANK', K_WZ, wid)
  local nxt = redis.call('ZRANGE', K_WZ, k + 1, k + 1)[1]
  if nxt then
    local nw = cmsgpack.unpack(redis.call('HGET', K_WK, nxt))
    local at = nw[W.DP] > 0 and slot_index(nw[W.SLOTS][1])
    if not at then return roster_rebuild({[wid] = w}) end
    p = at - 1
  end
  local n, dp = R.n, w[W.DP]
  local soff = (R.n == 0) and 0 or (#R.s - R.str + 1)
  local sl, recs, lzm = {}, {}, {}
  local zero = string.rep('\0', 24)
  for r = 1, dp do
    sl[r] = struct.pack('>I4', w[W.SLOTS][r])
    recs[r] = struct.pack(RREC, w[W.SLOTS][r], w[W.RIDS][r], r - 1, w[W.MNBT], w[W.TKV], w[W.KVE], soff, #wid, soff + #wid, #w[W.URL])
    lzm[r] = zero .. LZ.ck(wid, r - 1, w[W.SLOTS][r])
  end
  LZ.add(lzm)   -- the new ranks join the zero-load group: O(dp·log W)
  local s = R.s
  local n2 = n + dp
  local out
  if n == 0 then
    out = struct.pack('>I4', n2) .. table.concat(sl) .. table.concat(recs) .. wid .. w[W.URL]
  else
    out = struct.pack('>I4', n2) .. string.sub(s, 5, 4 + 4 * p) .. table.concat(sl) .. string.sub(s, 5 + 4 * p, 4 + 4 * n)
      .. string.sub(s, R.rb, R.rb + p * RW - 1) .. table.concat(recs) .. string.sub(s, R.rb + p * RW, R.str - 1)
      .. string.sub(s, R.str) .. wid .. w[W.URL]
  end
  redis.call('SET', K_ROSTER, out)
  if p == n then
    redis.call('APPEND', K_LD, string.rep('\0', 24 * dp))   -- the new worker sorts last: no read of lv
  else
    local lds = redis.call('GET', K_LD)
    redis.call('SET', K_LD, string.sub(lds, 1, 24 * p) .. string.rep('\0', 24 * dp) .. string.sub(lds, 24 * p + 1))
  end
  ros_written(out, n2)
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

-- release_expired releases every lease whose expiry is at or before now.
local function release_expired(now)
  local ids = redis.call('ZRANGEBYSCORE', K_LX, '-inf', now)
  for _, id in ipairs(ids) do
    local lp = redis.call('HGET', K_LS, id)
    if lp then
      local l = cmsgpack.unpack(lp)
      end_lease(id, l, l[L.EXPIRY])
    else
      redis.call('ZREM', K_LX, id)
    end
  end
end

-- Event index entries, parsed: {hdr = parent..flag | nil, recs = {{slot, tiers, children}...}, dirty}.
local function eparse(s)
  local recs = {}
  if not s then return nil, recs end
  local n = (#s - 9) / 8
  local off = 10
  for i = 1, n do
    local slot, w = struct.unpack('>I4i4', s, off)
    local t = w % 8
    recs[i] = {slot, t, (w - t) / 8}
    off = off + 8
  end
  return string.sub(s, 1, 9), recs
end

local function eget(seq)
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
  for seq, e in pairs(EC) do
    if e.dirty then
      if #e.recs == 0 then
        redis.call('HDEL', ebucket(seq), efield(seq))
      else
        local parts = {e.hdr}
        for i, r in ipairs(e.recs) do parts[i + 1] = struct.pack('>I4i4', r[1], r[3] * 8 + r[2]) end
        redis.call('HSET', ebucket(seq), efield(seq), table.concat(parts))
      end
    end
  end
  EC = {}
end

-- Counter deltas (held, orphans, non-device) per slot (CNT), flushed at the end.
local function cnt_add(kind, slot, d)
  if d ~= 0 then CNT[kind][slot] = (CNT[kind][slot] or 0) + d end
end
local function cnt_flush()
  for slot, d in pairs(CNT.h) do if d ~= 0 then redis.call('HINCRBY', K_SC, 'h' .. slot, d) end end
  for kind, key in pairs({o = K_ORPH, n = K_ND}) do
    for slot, d in pairs(CNT[kind]) do
      if d ~= 0 and redis.call('HINCRBY', key, slot, d) == 0 then redis.call('HDEL', key, slot) end
    end
  end
  CNT = {h = {}, o = {}, n = {}}
end

-- reclaim: bounded deferred deletion of dead slots' entries, then expired soft entries.
local function reclaim(now, buckets, softn)
  local done = 0
  while done < buckets do
    local slot = redis.call('LINDEX', K_DEAD, 0)
    if not slot then break end
    local cur = tonumber(redis.call('HGET', K_SC, 'rc') or '0')
    local key = K_G .. slot .. ':' .. cur
    local kv = redis.call('HGETALL', key)
    local islot = tonumber(slot)
    for i = 2, #kv, 2 do
      local e = eget(kv[i])
      local r = rfind(e, islot)
      if r then
        rdel(e, islot)
        if e.hdr and string.byte(e.hdr, 9) == 1 then
          local pe = eget(string.sub(e.hdr, 1, 8))
          local pr = rfind(pe, islot)
          if pr and pr[2] == 0 then rdel(pe, islot) end
        end
      end
    end
    redis.call('DEL', key)
    cur = cur + 1
    if cur >= NB_G then
      redis.call('LPOP', K_DEAD)
      redis.call('HDEL', K_SC, 'rc', 'h' .. slot)
      redis.call('HDEL', K_ORPH, slot)
      redis.call('HDEL', K_ND, slot)
    else
      redis.call('HSET', K_SC, 'rc', cur)
    end
    done = done + 1
  end
  eflush()
  if softn > 0 then
    local due = redis.call('ZRANGEBYSCORE', K_SX, '-inf', now, 'LIMIT', 0, softn)
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

-- sweep_sessions deletes up to SESS_SWEEP idle session bindings expired at now under ttl ms (memory:
-- sweepSessions). Lookups already ignore expired bindings; this only reclaims their memory.
local function sweep_sessions(now, ttl)
  local due = redis.call('ZRANGEBYSCORE', K_SY, '-inf', now - ttl, 'LIMIT', 0, SESS_SWEEP)
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

-- new_slot allocates a fresh index slot id.
local function new_slot() return redis.call('HINCRBY', K_SC, 'slot', 1) end
