-- apply_events.lua — apply a run of one worker's KV events, in order, exactly once per (worker, dp_rank).
--
-- KEYS: the pool's key list (see lib.lua).
-- ARGV: [1] now, ms  [2] worker id  [3] event count N, then 10 values per event:
--   kind (1 stored, 2 removed, 3 cleared) · dp rank · event id (20 digits, '' = unordered) ·
--   event id − 1 (20 digits, '' when the id is 0 or absent) · epoch ('' = unknown) ·
--   tier (0 device, 1 host, 2 disk) · block size (0 = not given) · parent engine hash (8 bytes, '' = root) ·
--   expected parent sequence hash (8 bytes; '' = the caller predicted "no parent mapping") ·
--   blocks: stored → (engine hash 8 ‖ sequence hash 8)*, removed → (engine hash 8)*.
-- Reply: {'unknown_pool'} | {'ok', next, applied, stale, parent_not_found, block_not_found, gaps, restarts,
--   block_size_mismatch, unknown_worker, stored_blocks, removed_blocks}; next ≤ N is the 0-based index of
--   the first event NOT processed (next < N: the caller's predicted parent mapping was wrong; it re-reads
--   and resumes there). Everything before next is applied; nothing after.
-- Validation of every argument happens before the first write; all index writes are buffered in Lua
-- tables and flushed at the end, so a bad argument never leaves a half-applied batch.
-- Complexity: O(blocks in the batch) hash operations + bounded reclamation (RECLAIM_BUCKETS, SOFT_SWEEP).
local now = tonumber(ARGV[2 - 1])
local wid = ARGV[2]
local n = tonumber(ARGV[3])
if not now or not n or #ARGV ~= 3 + 10 * n then return redis.error_reply('ERR apply_events: bad arguments') end
for i = 0, n - 1 do
  local b = 3 + 10 * i
  local kind, blocks = tonumber(ARGV[b + 1]), ARGV[b + 10]
  if not (kind == 1 or kind == 2 or kind == 3) or not tonumber(ARGV[b + 2]) or not tonumber(ARGV[b + 6]) or not tonumber(ARGV[b + 7]) then
    return redis.error_reply('ERR apply_events: bad event ' .. i)
  end
  if (kind == 1 and #blocks % 16 ~= 0) or (kind == 2 and #blocks % 8 ~= 0) or (#ARGV[b + 8] ~= 0 and #ARGV[b + 8] ~= 8) then
    return redis.error_reply('ERR apply_events: bad blocks in event ' .. i)
  end
end
local cfg = cfg_get()
if not cfg then return {'unknown_pool'} end
local res = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
local A, STALE, PNF, BNF, GAP, RST, BSM, UW, SB, RB = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10
local wp = redis.call('HGET', K_WK, wid)
if not wp then
  res[UW] = n
  return {'ok', n, unpack(res)}
end
local w = cmsgpack.unpack(wp)
local seen = tonumber(redis.call('HGET', K_SEEN, wid) or '0')
if now > seen then redis.call('HSET', K_SEEN, wid, now) end

-- Engine map cache: GC[slot][engine] = seq | false.
local GC = {}
local function gget(slot, engine)
  local m = GC[slot]
  if not m then m = {}; GC[slot] = m end
  local v = m[engine]
  if v == nil then
    v = redis.call('HGET', gkey(slot, engine), engine)
    m[engine] = v
  end
  return v
end
local GW = {}
local function gset(slot, engine, seq)
  local m = GC[slot]
  if not m then m = {}; GC[slot] = m; end
  m[engine] = seq
  local d = GW[slot]
  if not d then d = {}; GW[slot] = d end
  d[engine] = seq
end
local function gflush()
  for slot, m in pairs(GW) do
    for engine, seq in pairs(m) do
      if seq then redis.call('HSET', gkey(slot, engine), engine, seq) else redis.call('HDEL', gkey(slot, engine), engine) end
    end
  end
end

local ZERO9 = string.rep('\0', 9)
local function rstore(slot, seq, parent, ischild, engine, tier)
  gset(slot, engine, seq)
  local e = eget(seq)
  local r = rfind(e, slot)
  local bt = bit.lshift(1, tier)
  if r and r[2] ~= 0 then
    if bit.band(r[2], bt) ~= 0 then return false end
    local hadDev = bit.band(r[2], 1) ~= 0
    r[2] = bit.bor(r[2], bt); e.dirty = true
    if not hadDev and tier == 0 then cnt_add('n', slot, -1) end
    return true
  end
  if not r then r = {slot, 0, 0}; e.recs[#e.recs + 1] = r end
  e.hdr = parent .. (ischild and '\1' or '\0')
  r[2] = bt; e.dirty = true
  cnt_add('h', slot, 1)
  if tier ~= 0 then cnt_add('n', slot, 1) end
  cnt_add('o', slot, -r[3])
  if ischild then
    local pe = eget(parent)
    local pr = rfind(pe, slot)
    if not pr then
      pr = {slot, 0, 0}; pe.recs[#pe.recs + 1] = pr
      if not pe.hdr then pe.hdr = ZERO9 end
    end
    pr[3] = pr[3] + 1; pe.dirty = true
    if pr[2] == 0 then cnt_add('o', slot, 1) end
  end
  return true
end

local function runstore(slot, seq, engine, tier)
  local e = eget(seq)
  local r = rfind(e, slot)
  local bt = bit.lshift(1, tier)
  if not r or bit.band(r[2], bt) == 0 then return false end
  local hadDev = bit.band(r[2], 1) ~= 0
  r[2] = bit.band(r[2], bit.bnot(bt)); e.dirty = true
  if r[2] ~= 0 then
    if hadDev and tier == 0 then cnt_add('n', slot, 1) end
    return true
  end
  gset(slot, engine, false)
  cnt_add('h', slot, -1)
  if not hadDev then cnt_add('n', slot, -1) end
  cnt_add('o', slot, r[3])
  if string.byte(e.hdr, 9) == 1 then
    local pe = eget(string.sub(e.hdr, 1, 8))
    local pr = rfind(pe, slot)
    if not pr then
      pr = {slot, 0, 0}; pe.recs[#pe.recs + 1] = pr
      if not pe.hdr then pe.hdr = ZERO9 end
    end
    if pr[2] == 0 then cnt_add('o', slot, -1) end
    pr[3] = pr[3] - 1; pe.dirty = true
    if pr[2] == 0 and pr[3] == 0 then rdel(pe, slot) end
  end
  if r[3] == 0 then rdel(e, slot) end
  return true
end

-- Fence state per rank, cached: F[rid] = {epoch, lastid|false, degraded(bool)}.
local F, Fdirty = {}, {}
local function fget(rid)
  local f = F[rid]
  if not f then
    local v = redis.call('HMGET', K_FENCE, 'e' .. rid, 'i' .. rid, 'g' .. rid)
    f = {v[1] or '', v[2] or false, v[3] == '1'}
    F[rid] = f
  end
  return f
end

local wdirty = false
local function clear_rank(r)
  local old = w[7][r]
  redis.call('RPUSH', K_DEAD, old)
  w[7][r] = new_slot()
  wdirty = true
end

local next_i = n
for i = 0, n - 1 do
  local b = 3 + 10 * i
  local kind, rank = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2])
  local id, idm1, epoch = ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local tier, bsz = tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
  local pengine, pexpect, blocks = ARGV[b + 8], ARGV[b + 9], ARGV[b + 10]
  if rank < 0 or rank >= w[2] then
    res[UW] = res[UW] + 1
  else
    local rid = w[6][rank + 1]
    local f = fget(rid)
    local restart = epoch ~= '' and f[1] ~= epoch and f[1] ~= ''
    local stale = (not restart) and id ~= '' and f[2] and id <= f[2]
    -- Verify the caller's parent prediction before committing anything of this event.
    if kind == 1 and pengine ~= '' and not restart and not stale and (bsz == 0 or bsz == cfg.bs) then
      local actual = gget(w[7][rank + 1], pengine)
      if actual and actual ~= pexpect then next_i = i; break end
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
      local slot = w[7][rank + 1]
      if bsz > 0 and bsz ~= cfg.bs then
        res[BSM] = res[BSM] + 1
      elseif kind == 1 then
        local parent, ischild, ok = ZERO9:sub(1, 8), false, true
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
          for off = 1, #blocks, 16 do
            local seq = string.sub(blocks, off + 8, off + 15)
            if rstore(slot, seq, parent, ischild, string.sub(blocks, off, off + 7), tier) then res[SB] = res[SB] + 1 end
            parent, ischild = seq, true
          end
          res[A] = res[A] + 1
        end
      elseif kind == 2 then
        for off = 1, #blocks, 8 do
          local engine = string.sub(blocks, off, off + 7)
          local seq = gget(slot, engine)
          if not seq or not runstore(slot, seq, engine, tier) then
            res[BNF] = res[BNF] + 1
          else
            res[RB] = res[RB] + 1
          end
        end
        res[A] = res[A] + 1
      else
        for r = 1, w[2] do
          clear_rank(r)
          local fr = fget(w[6][r])
          fr[3] = false
          Fdirty[w[6][r]] = true
        end
        res[A] = res[A] + 1
      end
    end
  end
end

-- Flush buffered writes. Engine maps of slots cleared in this batch are written too (they are dead and
-- reclaimed like the rest).
gflush()
eflush()
cnt_flush()
for rid in pairs(Fdirty) do
  local f = F[rid]
  redis.call('HSET', K_FENCE, 'e' .. rid, f[1], 'g' .. rid, f[3] and '1' or '0')
  if f[2] then redis.call('HSET', K_FENCE, 'i' .. rid, f[2]) else redis.call('HDEL', K_FENCE, 'i' .. rid) end
end
if wdirty then
  redis.call('HSET', K_WK, wid, cmsgpack.pack(w))
  roster_rebuild({[wid] = w})
end
reclaim(now, RECLAIM_BUCKETS, SOFT_SWEEP)
return {'ok', next_i, unpack(res)}
