-- apply_events.lua — apply a run of one worker's KV events, in order, exactly once per (worker, dp_rank).
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] now, ms  [2] worker id  [3] event count N  [4] work budget, in Redis commands (0 = none)
--   [5] engine-map load GLOAD, blocks per bucket (> 0, may be fractional; 0 = never grow): a slot of layout 4
--   holding more than GLOAD blocks per engine-map bucket gets buckets split before the events (lib.lua
--   lh_split)  [6] event-index load ELOAD, entries per bucket, the same for the pool's event index, then
--   12 values per event:
--   kind (1 stored, 2 removed, 3 cleared) · dp rank · event id (20 digits, '' = unordered) ·
--   event id − 1 (20 digits, '' when the id is 0 or absent) · epoch ('' = unknown) ·
--   tier (0 device, 1 host, 2 disk) · block size (0 = not given) · parent engine hash (8 bytes, '' = root) ·
--   expected parent sequence hash (8 bytes; '' = the caller predicted "no parent mapping") ·
--   blocks: stored → (engine hash 8 ‖ sequence hash 8)*, removed → (engine hash 8)* ·
--   event id − max jump (20 digits, '' when absent or ≤ 0): an id beyond the rank's last one by more than
--   the jump (default 2^32) is an engine restart, not a gap: the rank is cleared and counted in restarts ·
--   continuation ('1': this piece continues the previous piece's event — no id of its own, its parent is
--   that piece's last block — applied only if that event was, and not counted in applied).
-- Reply: {'unknown_pool'} | {'layout_mismatch', found layout} | {'ok', next, applied, stale, parent_not_found, block_not_found, gaps, restarts,
--   block_size_mismatch, unknown_worker, stored_blocks, removed_blocks, budget_stop, last_applied};
--   next ≤ N is the 0-based index of the first event NOT processed. Everything before next is applied;
--   nothing after. next < N either because the work budget was spent (budget_stop 1: the caller resumes
--   there with its predictions) or because the caller's predicted parent mapping was wrong (budget_stop
--   0: it re-reads and resumes there). last_applied (1/0): whether the event of the last processed piece
--   was applied — the caller drops the continuation pieces that follow an event that was not.
-- Work budget: before every event but the first, the call stops when the Redis commands issued and
--   buffered so far plus the event's estimated cost (the call's commands per applied block so far; before
--   any, the worst case: 3 per stored block, 5 per removed block, 2 per rank cleared) would exceed the
--   budget: a call's time is bounded by its commands (~4–8 µs each with their Lua work at 1 M entries),
--   not by its block count, whose cost varies 1.5× with how many workers already hold the chain. The
--   first event is always processed (progress); the caller keeps pieces small (16 blocks).
-- Validation of every argument (kinds, integral ranks/sizes, tiers 0..2, blob lengths) happens before the
-- first write, so a bad argument never leaves a half-applied batch. Event-index entries are handled as raw
-- strings; a block new to the index is written at once with HSETNX (see store_event), other entry writes
-- are buffered and flushed at the end; engine-map writes go out at once, one HSET / HDEL per block.
-- Complexity: O(blocks in the batch) hash operations — one HSETNX per new block (an HGET and an HSET per
-- block other workers hold) plus one engine-map HSET per block — at most the work budget's commands (+ one
-- event's worst case when the first event alone exceeds it) + bounded reclamation (RECLAIM_CALLS,
-- SOFT_SWEEP) + for the event index and per rank the events name, one split of its map, up to GSPLITS
-- within half the work budget (each an HGETALL of ≤ ~2 loads of entries, one HSET and one HDEL) + while a rescoring of the load order is under way, one step of it (LZ.tick: RESCORE_TICK
-- members).
--
-- Form: a module (luascripts.ApplyEvents.Module), as route.lua: this file runs once, when the library is
-- loaded, and returns the operation. Its functions are made once, not on every call (a call made ~25
-- closures, each walking the open upvalues), and the tables a call fills — entries read (E, ED, EB), the
-- engine-map cache (GC, GK), fences (F, Fdirty), an event's hashes (SEQS, DUP) — are kept and emptied by
-- the next call (MEMO.empty) instead of being made and grown by rehash on every call: ~80 table resizes a
-- call, then swept by the collector. At load time Redis 7.0 exposes no standard library (string, struct,
-- bit): this level holds constants and function definitions; the library's fast locals (sub, byte, spack,
-- ...) are bound at the first call (bind_lib).

-- The request (read_request): ARGV[1..6]; NV values per event after A0 arguments.
local now, wid, n, budget, gload, eload
local NV, A0 = 12, 6
-- Per-call state, set by the main sequence: the pool's knobs, the worker's record and whether it changed.
local cfg, w, wdirty
-- res: the reply's counts (reset per call); A..RB their positions; REPLY the 'ok' reply, rewritten by every
-- call (Redis converts it before the next call runs).
local res = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
local A, STALE, PNF, BNF, GAP, RST, BSM, UW, SB, RB = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
local REPLY = {}
-- apply_event's outcomes: the event was applied or dropped; the call stops before it (the work budget, or
-- the caller's predicted parent mapping was wrong).
local EV_APPLIED, EV_DROPPED, EV_BUDGET, EV_PARENT = 1, 2, 3, 4
-- work: Redis commands issued so far and buffered for the flush (the work budget's unit, see the header);
-- applied_blocks: blocks of the events applied so far (estimate's rate).
local work, applied_blocks = 0, 0
-- Per-event counter deltas (one slot per event): held, non-device, orphans.
local dh, dn, dor = 0, 0, 0
-- The entry codec's offsets (lib.lua ENT).
local HDR, FIRST, REC, TIERS, SLOT_LEN, WORD_FMT = ENT.HDR, ENT.FIRST, ENT.REC, ENT.TIERS, ENT.SLOT_LEN, ENT.WORD_FMT
-- Engine maps per bucket key, by field (the engine hash's first 7 bytes; lib.lua's gbucket picks the bucket).
-- Reads are cached in GC[gk][field] = seq | false. Writes go to Redis at once, one HSET / HDEL per block
-- (and into GC when that bucket was read): buffering them to group them per bucket saved ~12 % of their
-- commands (a 64-block event touches ~57 of a slot's 256 buckets) but cost more Lua than that.
-- GK[slot] = {[0] = the slot's key prefix, [b + 1] = bucket b's key}: a key is the prefix and one number (a
-- two-part concatenation), as gkey builds it. Both per call (the keys are the pool's).
local GC, GK = {}, {}
-- Event index entries as raw strings (no per-record Lua tables), in lib.lua's entry codec ENT: E[seq] =
-- header (parent seq ‖ is_child, ENT.HDR bytes) ‖ {slot, children·ENT.TIERS + tiers}* ('' = absent);
-- ED[seq] = written. A record is found by a record-aligned string.find of its slot bytes.
-- EB[seq] = the entry's bucket key, kept by eraw for the flush (one key string per entry and call). The
-- field is efield(seq) written out as sub(seq, 1, 7) on this path: the call costs ~2 % of a shared
-- chain's instructions per block (callgrind, ingest-floor.sh REPLICAS=4: 48.6 k vs 49.7 k).
local E, ED, EB = {}, {}, {}
-- Fence state per rank, cached: F[rid] = {epoch, lastid|false, degraded(bool)}; Fdirty[rid] = changed.
-- FPRE[rid]: the fences of the ranks the call's events name, read by split_maps before any event and taken
-- by fget on first use.
local F, Fdirty, FPRE = {}, {}, {}
-- store_event's hashes of one event (SEQS[1..nb], overwritten) and their set (DUP, emptied per event);
-- split_maps' ranks seen, their list in first-named order, and the fields of its two HMGETs.
local SEQS, DUP, RANKS, RLIST, SCF, FCF = {}, {}, {}, {}, {}, {}
-- SCH[slot]: the named slots' held blocks (sc 'h<slot>') as split_maps read them, and EN0 the index's entries
-- ('en'): finish writes them back with this call's deltas in one HSET (counts_flush); CFA its arguments.
local SCH, CFA, EN0 = {}, {}, 0
-- Standard-library locals and the empty header, bound at the first call (bind_lib).
local sub, byte, spack, sunpack, band, bor, bnot, NO_HDR

local function bind_lib()
  sub, byte, spack, sunpack = string.sub, string.byte, struct.pack, struct.unpack
  band, bor, bnot = bit.band, bit.bor, bit.bnot
  NO_HDR = string.rep('\0', HDR)   -- no parent, not a child
end

-- read_request reads and validates ARGV (every argument before the first write, so a bad argument never
-- leaves a half-applied batch); returns an error reply, or nil.
local function read_request(ARGV)
  now, wid, n, budget = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
  gload, eload = tonumber(ARGV[5]), tonumber(ARGV[6])
  if not now or not n or not budget or budget < 0 or not gload or gload < 0 or not eload or eload < 0
    or #ARGV ~= A0 + NV * n then
    return redis.error_reply('ERR apply_events: bad arguments')
  end
  for i = 0, n - 1 do
    local b = A0 + NV * i
    local kind, blocks = tonumber(ARGV[b + 1]), ARGV[b + 10]
    local rk, tr, bz = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
    if not (kind == 1 or kind == 2 or kind == 3) or not rk or not tr or not bz or rk % 1 ~= 0 or bz % 1 ~= 0
      or not (tr == 0 or tr == 1 or tr == 2) then
      return redis.error_reply('ERR apply_events: bad event ' .. i)
    end
    if (kind == 1 and #blocks % 16 ~= 0) or (kind == 2 and #blocks % 8 ~= 0) or (#ARGV[b + 8] ~= 0 and #ARGV[b + 8] ~= 8) then
      return redis.error_reply('ERR apply_events: bad blocks in event ' .. i)
    end
    if ARGV[b + 12] ~= '0' and ARGV[b + 12] ~= '1' then return redis.error_reply('ERR apply_events: bad continuation in event ' .. i) end
  end
  return nil
end

-- reset_state empties what the last call left (MEMO.empty: a table one call filled past MEMO.keep is
-- replaced, not kept).
local function reset_state()
  for j = 1, 10 do res[j] = 0 end
  work, applied_blocks, dh, dn, dor, wdirty = 0, 0, 0, 0, 0, false
  GC, GK, E, ED, EB = MEMO.empty(GC), MEMO.empty(GK), MEMO.empty(E), MEMO.empty(ED), MEMO.empty(EB)
  F, Fdirty, FPRE = MEMO.empty(F), MEMO.empty(Fdirty), MEMO.empty(FPRE)
  SCH = MEMO.empty(SCH)
end

-- ok_reply: the 'ok' reply (header), res's counts in order.
local function ok_reply(next_i, budget_stop, last_applied)
  REPLY[1], REPLY[2] = 'ok', next_i
  for j = 1, 10 do REPLY[2 + j] = res[j] end
  REPLY[13], REPLY[14] = budget_stop, last_applied
  return REPLY
end

-- event_work: an event's worst case in those commands: a stored block reads or creates its entry, writes
-- it back and its engine-map bucket (3); a removed block also reads its engine map and its parent (5); a
-- Cleared event clears every rank (2 each).
-- event_blocks: the blocks a Stored (16 bytes each) or Removed (8) event's blob holds; 0 for Cleared.
local function event_blocks(kind, blob_len)
  if kind == 1 then return blob_len / 16 elseif kind == 2 then return blob_len / 8 end
  return 0
end
local function event_work(kind, blob_len, dp)
  if kind == 1 then return 3 * event_blocks(kind, blob_len) + 2 elseif kind == 2 then return 5 * event_blocks(kind, blob_len) end
  return 2 * dp
end
-- estimate: what the budget check expects an event to cost: once the call has applied blocks, at the
-- call's own rate so far (commands per block: ~2 for chains new to the index, ~3 for chains other workers
-- hold), else the worst case (3 per stored block: it would stop a call of new chains after one piece,
-- not two, under the default budget of 90); a wrong guess overshoots the budget by at most one piece's
-- worst case.
local function estimate(kind, blob_len, dp)
  if kind == 3 or applied_blocks == 0 then return event_work(kind, blob_len, dp) end
  return math.ceil(event_blocks(kind, blob_len) * work / applied_blocks)
end

-- gk_of, gkb, gget, gset: the engine maps (GC, GK above).
local function gk_of(slot)
  local t = GK[slot]
  if not t then t = {[0] = K_G .. istr(slot) .. ':'}; GK[slot] = t end
  return t
end
local function gkb(slot, b)
  local t = gk_of(slot)
  local k = t[b + 1]
  if not k then k = t[0] .. istr(b); t[b + 1] = k end
  return k
end
local function gget(slot, engine)
  local k, f = gkb(slot, gbucket(engine, gparams(slot))), gfield(engine)
  local m = GC[k]
  if not m then m = {}; GC[k] = m end
  local v = m[f]
  if v == nil then
    v = redis.call('HGET', k, f)
    work = work + 1
    m[f] = v
  end
  return v
end
-- gset: engine hash engine (8 bytes) maps to seq (false: removed). store_event inlines it.
local function gset(slot, engine, seq)
  local k, f = gkb(slot, gbucket(engine, gparams(slot))), gfield(engine)
  if seq then redis.call('HSET', k, f, seq) else redis.call('HDEL', k, f) end
  work = work + 1
  local m = GC[k]
  if m then m[f] = seq end
end

-- eraw, eput, rpos, rget, rset, rcut, eflush_raw: the event index's entries (E, ED, EB above).
local function eraw(seq)
  local s = E[seq]
  if not s then
    local k = ebucket(seq)
    s = redis.call('HGET', k, sub(seq, 1, 7)) or ''
    work = work + 1
    E[seq], EB[seq] = s, k
  end
  return s
end
local function eput(seq, s)
  E[seq] = s
  if not ED[seq] then ED[seq] = true; work = work + 1 end
end
local function rpos(s, key4)
  local from = FIRST
  while true do
    local p = string.find(s, key4, from, true)
    if not p then return nil end
    if (p - FIRST) % REC == 0 then return p end
    from = p + 1
  end
end
-- rget: tiers and held children of the record at p; rset: the entry with that record replaced.
local function rget(s, p)
  local word = sunpack(WORD_FMT, s, p + SLOT_LEN)
  local t = word % TIERS
  return t, (word - t) / TIERS
end
local function rset(s, p, t, c) return sub(s, 1, p + SLOT_LEN - 1) .. spack(WORD_FMT, c * TIERS + t) .. sub(s, p + REC) end
local function rcut(s, p) return sub(s, 1, p - 1) .. sub(s, p + REC) end
local function eflush_raw()
  for seq in pairs(ED) do
    local s = E[seq]
    local k = EB[seq] or ebucket(seq)
    if #s <= HDR then ENC = ENC - redis.call('HDEL', k, sub(seq, 1, 7)) else ENC = ENC + redis.call('HSET', k, sub(seq, 1, 7), s) end
  end
end
-- counts_flush: sc's index entries ('en', lib.lua en_add) and the held blocks of the slots split_maps read
-- ('h<slot>', cnt_add) as one HSET of the values read plus this call's deltas — exact, as nothing else
-- writes them between that read and this write in one atomic call — in place of an HINCRBY each; the other
-- counters (slots not read: made by a Cleared event or a restart in this call; orphans, non-device) by
-- lib.lua's flushes.
local function counts_flush()
  local args = MEMO.empty(CFA)
  CFA = args
  if ENC ~= 0 then args[1], args[2], ENC = 'en', istr(EN0 + ENC), 0 end
  for slot, v in pairs(SCH) do
    local d = cnt_take('h', slot)
    if d ~= 0 then args[#args + 1], args[#args + 2] = 'h' .. istr(slot), istr(v + d) end
  end
  if #args > 0 then redis.call('HSET', K_SC, unpack(args)) end
  en_flush()
  cnt_flush()
end

-- parent_child: one more (d = 1) or one fewer (d = -1) held child of slot key4 on the parent entry.
local function parent_child(parent, key4, d)
  local ps = eraw(parent)
  local pp = rpos(ps, key4)
  local pt, pc = 0, 0
  if not pp then
    if ps == '' then ps = NO_HDR end
    pp = #ps + 1
    ps = ps .. key4 .. '\0\0\0\0'
  else
    pt, pc = rget(ps, pp)
  end
  if pt == 0 then dor = dor + d end
  pc = pc + d
  if d < 0 and pt == 0 and pc == 0 then ps = rcut(ps, pp) else ps = rset(ps, pp, pt, pc) end
  eput(parent, ps)
end

-- rstore_core: memory's rankIndex.store on the raw entry, without the engine map and the parent's child
-- count; returns 0 (already held in that tier), 1 (a tier added to a held block) or 2 (the block became
-- held: its parent gains a held child). extra (0 or 1): held children the record gains in the same write
-- (store_event's fast path: the next block just became held), so the entry is rebuilt once, not twice.
-- pseq, pflag: the entry's header (parent seq, is-child byte), passed apart and joined in the entry's one
-- concatenation (a header string of its own, and rset's whole entry cut again after it, were two more
-- strings per block for the collector).
local function rstore_core(key4, seq, pseq, pflag, tier, bt, extra)
  local s = eraw(seq)
  local p = rpos(s, key4)
  local c = 0
  if p then
    local t
    t, c = rget(s, p)
    if t ~= 0 then
      if band(t, bt) ~= 0 then
        if extra ~= 0 then eput(seq, rset(s, p, t, c + extra)) end
        return 0
      end
      eput(seq, rset(s, p, bor(t, bt), c + extra))
      if band(t, 1) == 0 and tier == 0 then dn = dn - 1 end
      return 1
    end
    eput(seq, pseq .. pflag .. sub(s, FIRST, p + SLOT_LEN - 1) .. spack(WORD_FMT, (c + extra) * TIERS + bt) .. sub(s, p + REC))
  else
    eput(seq, pseq .. pflag .. sub(s, FIRST) .. key4 .. spack(WORD_FMT, extra * TIERS + bt))
  end
  dh = dh + 1
  if tier ~= 0 then dn = dn + 1 end
  dor = dor - c
  return 2
end

-- store_event: one Stored event's blocks (already fenced; parent resolved). Returns stored blocks.
-- Fast path (the event's sequence hashes are distinct and its parent is not one of them): blocks are
-- visited last to first, so each block's held-child count is known before it is written, and a block new
-- to the index is written with one HSETNX (no read); the first existing entry switches the rest of the
-- event to read-modify-write. Otherwise: memory's order, block by block. Both give the same final state.
local function store_event(slot, blocks, parent, ischild, tier)
  local key4, bt, sb = spack(ENT.SLOT_FMT, slot), bit.lshift(1, tier), 0
  local nb = #blocks / 16
  local seqs, dup = SEQS, MEMO.empty(DUP)
  DUP = dup
  local fast = true
  -- Every block's engine-map entry first (gset inlined: this loop runs once per stored block); nothing
  -- below reads the engine map, so the order against the entries' writes does not matter.
  local gt, g = gk_of(slot), gparams(slot)
  local fixed = g.nb == NB_G
  for j = 1, nb do
    local off = j * 16 - 15
    local seq = sub(blocks, off + 8, off + 15)
    if dup[seq] then fast = false end
    dup[seq] = true
    seqs[j] = seq
    local b
    if fixed then b = byte(blocks, off + 7)   -- gbucket's base case, written out: no call per block
    else
      local x, y, z = byte(blocks, off + 5, off + 7)
      b = lh_addr((x * 256 + y) * 256 + z, g)
    end
    local k = gt[b + 1]
    if not k then k = gt[0] .. istr(b); gt[b + 1] = k end   -- gkb
    local f = sub(blocks, off, off + 6)
    redis.call('HSET', k, f, seq)
    local m = GC[k]
    -- The last block's mapping is cached even in a bucket not read yet: the next piece of a split event
    -- (and often the worker's next event) names it as its parent, and its check would read it back.
    if not m and j == nb then m = {}; GC[k] = m end
    if m then m[f] = seq end
  end
  work = work + nb
  if ischild and dup[parent] then fast = false end
  if not fast then
    for j = 1, nb do
      local seq = seqs[j]
      local st = rstore_core(key4, seq, parent, ischild and '\1' or '\0', tier, bt, 0)
      if st > 0 then sb = sb + 1 end
      if st == 2 and ischild then parent_child(parent, key4, 1) end
      parent, ischild = seq, true
    end
    return sb
  end
  local ebase = eparams().nb == NB_E   -- the event index still has its base bucket count
  local rec0, rec1 = key4 .. spack(WORD_FMT, bt), key4 .. spack(WORD_FMT, TIERS + bt)   -- no child / one held child
  local sfx0, sfx1 = '\1' .. rec0, '\1' .. rec1
  local inc, probe = false, true
  for j = nb, 1, -1 do
    local seq = seqs[j]
    local st = nil
    if probe and E[seq] == nil then
      local v
      if j > 1 then v = seqs[j - 1] .. (inc and sfx1 or sfx0)
      else v = parent .. (ischild and '\1' or '\0') .. (inc and rec1 or rec0) end
      work = work + 1
      local x, a, b = byte(seq, 6, 8)   -- ebucket, its base case written out (ebn); efield
      local eb = ebase and (a * 256 + b) % NB_E or ebn(x, a, b)
      if redis.call('HSETNX', K_E .. istr(eb), sub(seq, 1, 7), v) == 1 then
        ENC = ENC + 1
        E[seq] = v   -- the next piece of a split event reads its parent, this event's last block
        dh = dh + 1
        if tier ~= 0 then dn = dn + 1 end
        st = 2
      else
        probe = false
      end
    end
    if not st then
      if j == 1 then st = rstore_core(key4, seq, parent, ischild and '\1' or '\0', tier, bt, inc and 1 or 0)
      else st = rstore_core(key4, seq, seqs[j - 1], '\1', tier, bt, inc and 1 or 0) end
    end
    if st > 0 then sb = sb + 1 end
    inc = st == 2
  end
  if inc and ischild then parent_child(parent, key4, 1) end
  return sb
end

-- runstore: memory's rankIndex.unstore; true when the block was held in that tier.
local function runstore(key4, seq, engine, slot, tier)
  local s = eraw(seq)
  local p = rpos(s, key4)
  if not p then return false end
  local t, c = rget(s, p)
  local bt = bit.lshift(1, tier)
  if band(t, bt) == 0 then return false end
  local hadDev = band(t, 1) ~= 0
  local t2 = band(t, bnot(bt))
  if t2 ~= 0 then
    eput(seq, rset(s, p, t2, c))
    if hadDev and tier == 0 then dn = dn + 1 end
    return true
  end
  if c == 0 then eput(seq, rcut(s, p)) else eput(seq, rset(s, p, 0, c)) end
  gset(slot, engine, false)
  dh = dh - 1
  if not hadDev then dn = dn - 1 end
  dor = dor + c
  if byte(s, HDR) == 1 then parent_child(sub(s, 1, SEQ_LEN), key4, -1) end
  return true
end

-- fget: rank rid's fence (F above), read once per call.
local function fget(rid)
  local f = F[rid]
  if not f then
    f = FPRE[rid]
    if not f then
      local r = istr(rid)
      local v = redis.call('HMGET', K_FENCE, 'e' .. r, 'i' .. r, 'g' .. r)
      f = {v[1] or '', v[2] or false, v[3] == '1'}
    end
    work = work + 2   -- the read and the write back (charged on first use, prefetched or not)
    F[rid] = f
  end
  return f
end

local function clear_rank(r)
  local old = w[W.SLOTS][r]
  redis.call('RPUSH', K_DEAD, old)
  w[W.SLOTS][r] = new_slot(wid)
  if not wdirty then work = work + 4 end   -- the worker record and roster rewrite at the end
  wdirty = true
  work = work + 2
end

-- Maps that outgrew their buckets (lib.lua lh_params: more than their load of entries per bucket), before
-- any event: the event index, then the engine maps of the ranks this call's events name; for each, one
-- split, and more (up to GSPLITS) only while they fit in half the budget. A split is charged to the budget
-- (2 commands and a quarter of one per entry it read: ~1 µs per entry against ~4 µs per command), so the
-- call carries fewer blocks and its time stays bounded. At the default loads an engine map needs a split
-- every ~200 blocks its rank adds and the index one every ~64 entries the pool adds; the entry counts read
-- are the last call's, so a map lags by one call.
-- grow_map splits map g (bucket keys pre .. n, count in field cnt of hash ck) while it holds more than
-- load·nb of its entries.
local function grow_map(pre, g, ck, cnt, entries, load)
  local k = 0
  while g.grow and g.nb < GMAX and entries > load * g.nb and k < GSPLITS do
    -- The next split's cost, its bucket at the most (twice the average) as it is charged below.
    local est = 2 + math.ceil(2 * entries / g.nb / 4)
    if k > 0 and budget > 0 and work + est > budget / 2 then break end
    work = work + 2 + math.ceil(lh_split(pre, g, ck, cnt) / 4)
    k = k + 1
  end
end

-- split_maps: the maps that outgrew their buckets, before any event (see grow_map). What it reads comes in
-- two HMGETs whatever the number of ranks the events name (RLIST): sc's index count and entries ('egn',
-- 'en') with each named slot's held blocks ('h<slot>'), and fence's bucket count of each named slot
-- ('gn<slot>', given to gparams) with each named rank's fence (FPRE, fget's). One read of sc and one of fence
-- per rank and one of the index's before: two to four commands fewer per call, ~32 blocks a call
-- (docs/PERFORMANCE.md "Twenty-third session"). Fields of ranks out of range are not read (their events
-- are counted as unknown workers).
local function split_maps(ARGV)
  local ranks, list = MEMO.empty(RANKS), MEMO.empty(RLIST)
  RANKS, RLIST = ranks, list
  for i = 0, n - 1 do
    local rank = tonumber(ARGV[A0 + NV * i + 2])
    if rank >= 0 and rank < w[W.DP] and not ranks[rank] then
      ranks[rank] = true
      list[#list + 1] = rank
    end
  end
  local sf, ff = MEMO.empty(SCF), MEMO.empty(FCF)
  SCF, FCF = sf, ff
  sf[1], sf[2] = 'egn', 'en'
  for j, rank in ipairs(list) do
    local slot, r = w[W.SLOTS][rank + 1], istr(w[W.RIDS][rank + 1])
    sf[2 + j] = 'h' .. istr(slot)
    ff[4 * j - 3], ff[4 * j - 2], ff[4 * j - 1], ff[4 * j] = 'gn' .. istr(slot), 'e' .. r, 'i' .. r, 'g' .. r
  end
  local sv = redis.call('HMGET', K_SC, unpack(sf))
  EGN, EN0 = sv[1], tonumber(sv[2] or '') or 0
  for j, rank in ipairs(list) do SCH[w[W.SLOTS][rank + 1]] = tonumber(sv[2 + j] or '') or 0 end
  if #list > 0 then
    local fv = redis.call('HMGET', K_FENCE, unpack(ff))
    for j, rank in ipairs(list) do
      gparams(w[W.SLOTS][rank + 1], fv[4 * j - 3])
      FPRE[w[W.RIDS][rank + 1]] = {fv[4 * j - 2] or '', fv[4 * j - 1] or false, fv[4 * j] == '1'}
    end
  end
  if eload > 0 then grow_map(K_E, eparams(), K_SC, 'egn', EN0, eload) end
  if gload > 0 then
    for _, rank in ipairs(list) do
      local slot = w[W.SLOTS][rank + 1]
      local g = gparams(slot)
      if g.grow then   -- its entries: the slot's held blocks (sc 'h<slot>', as the last call left them)
        grow_map(K_G .. istr(slot) .. ':', g, K_FENCE, 'gn' .. slot, SCH[slot], gload)
      end
    end
  end
end

-- apply_event: event i (0-based) of the call, memory's fence then its effect (memory: applyEvent);
-- prev_applied: whether the previous piece's event was applied. Returns EV_APPLIED, EV_DROPPED, or
-- EV_BUDGET / EV_PARENT when the call stops before it.
local function apply_event(ARGV, i, prev_applied)
  local b = A0 + NV * i
  local kind, rank = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local id, idm1, epoch = ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local tier, bsz = tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
  local pengine, pexpect, blocks, idmj = ARGV[b + 8], ARGV[b + 9], ARGV[b + 10], ARGV[b + 11]
  local cont, done = ARGV[b + 12] == '1', false
  if cont and not prev_applied then
    done = false   -- continues an event that was dropped: dropped too, and not counted again
  elseif i > 0 and budget > 0 and work + estimate(kind, #blocks, w[W.DP]) > budget then
    return EV_BUDGET
  elseif rank < 0 or rank >= w[W.DP] then
    res[UW] = res[UW] + 1
  else
    local rid = w[W.RIDS][rank + 1]
    local f = fget(rid)
    local restart = epoch ~= '' and f[1] ~= epoch and f[1] ~= ''
    local stale = (not restart) and id ~= '' and f[2] and id <= f[2]
    -- Verify the caller's parent prediction before committing anything of this event.
    if kind == 1 and pengine ~= '' and not restart and not stale and (bsz == 0 or bsz == cfg.bs) then
      local actual = gget(w[W.SLOTS][rank + 1], pengine)
      if actual and actual ~= pexpect then return EV_PARENT end
    end
    -- fence (memory: fence)
    local apply = true
    if epoch ~= '' and f[1] ~= epoch then
      if f[1] ~= '' then
        clear_rank(rank + 1)
        f[2], f[3] = false, false
        res[RST] = res[RST] + 1
      end
      f[1] = epoch
      Fdirty[rid] = true
    end
    if id ~= '' and f[2] and idmj ~= '' and idmj > f[2] then
      -- An id far ahead of the last (memory: fence): a restart of the engine, not billions of lost events.
      clear_rank(rank + 1)
      f[2], f[3] = false, false
      res[RST] = res[RST] + 1
      Fdirty[rid] = true
    end
    if id ~= '' then
      if f[2] and id <= f[2] then
        res[STALE] = res[STALE] + 1
        apply = false
      else
        if f[2] and idm1 ~= '' and idm1 > f[2] then
          res[GAP] = res[GAP] + 1
          f[3] = true
        end
        f[2] = id
        Fdirty[rid] = true
      end
    end
    if apply then
      local slot = w[W.SLOTS][rank + 1]
      if bsz > 0 and bsz ~= cfg.bs then
        res[BSM] = res[BSM] + 1
      elseif kind == 1 then
        local parent, ischild, ok = NO_HDR:sub(1, SEQ_LEN), false, true
        if pengine ~= '' then
          local actual = gget(slot, pengine)
          if not actual then
            res[PNF] = res[PNF] + 1
            ok = false
          else
            parent, ischild = actual, true
          end
        end
        if ok then
          dh, dn, dor = 0, 0, 0
          res[SB] = res[SB] + store_event(slot, blocks, parent, ischild, tier)
          cnt_add('h', slot, dh); cnt_add('n', slot, dn); cnt_add('o', slot, dor)
          done = true
        end
      elseif kind == 2 then
        local key4 = spack(ENT.SLOT_FMT, slot)
        dh, dn, dor = 0, 0, 0
        for off = 1, #blocks, 8 do
          local engine = sub(blocks, off, off + 7)
          local seq = gget(slot, engine)
          if not seq or not runstore(key4, seq, engine, slot, tier) then
            res[BNF] = res[BNF] + 1
          else
            res[RB] = res[RB] + 1
          end
        end
        cnt_add('h', slot, dh); cnt_add('n', slot, dn); cnt_add('o', slot, dor)
        done = true
      else
        for r = 1, w[W.DP] do
          clear_rank(r)
          local fr = fget(w[W.RIDS][r])
          fr[3] = false
          Fdirty[w[W.RIDS][r]] = true
        end
        done = true
      end
    end
  end
  if done and not cont then res[A] = res[A] + 1 end
  if done then applied_blocks = applied_blocks + event_blocks(kind, #blocks); return EV_APPLIED end
  return EV_DROPPED
end

-- finish: the buffered writes (engine-map writes already went out; those of slots cleared in this batch
-- are dead and reclaimed like the rest), the fences, the worker record, bounded reclamation, a rescoring
-- step.
local function finish()
  eflush_raw()
  counts_flush()
  for rid in pairs(Fdirty) do
    local f = F[rid]
    local g, r = f[3] and '1' or '0', istr(rid)
    if f[2] then redis.call('HSET', K_FENCE, 'e' .. r, f[1], 'g' .. r, g, 'i' .. r, f[2])
    else
      redis.call('HSET', K_FENCE, 'e' .. r, f[1], 'g' .. r, g)
      redis.call('HDEL', K_FENCE, 'i' .. r)
    end
  end
  if wdirty then
    redis.call('HSET', K_WK, wid, cmsgpack.pack(w))
    roster_replace(wid, w)
  end
  reclaim(now, SOFT_SWEEP)
  LZ.tick()
end

-- The main sequence (memory: ApplyEvents).
return function(KEYS, ARGV)
  if not sub then bind_lib() end
  bind(KEYS)
  local bad = read_request(ARGV)
  if bad then return bad end
  local refused
  cfg, refused = cfg_get()
  if not cfg then return refused end
  LZ.use(cfg)   -- the load order's knobs are these (LZ.tick and clear_rank's lz writes read no cfg again)
  reset_state()
  local wp = redis.call('HGET', K_WK, wid)
  if not wp then
    -- Every piece is dropped; continuations are not events of their own.
    for i = 0, n - 1 do
      if ARGV[A0 + NV * i + 12] == '0' then res[UW] = res[UW] + 1 end
    end
    return ok_reply(n, 0, 0)
  end
  w = cmsgpack.unpack(wp)
  local seen = tonumber(redis.call('HGET', K_SEEN, wid) or '0')
  if now > seen then seen_set(wid, now) end
  split_maps(ARGV)
  local next_i, budget_stop, prev_applied = n, 0, true
  for i = 0, n - 1 do
    local st = apply_event(ARGV, i, prev_applied)
    if st == EV_BUDGET then next_i, budget_stop = i, 1; break end
    if st == EV_PARENT then next_i = i; break end
    prev_applied = st == EV_APPLIED
  end
  finish()
  return ok_reply(next_i, budget_stop, prev_applied and 1 or 0)
end
