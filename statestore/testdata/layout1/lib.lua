-- lib.lua — helpers shared by every kvrouter script (prepended to each script body by the Go loader,
-- so each script is still one self-contained EVALSHA call).
--
-- KEYS (the same list for every script; built by statestore.poolKeys, all under the pool's hash tag):
--   1 cfg     HASH   pool knobs (short field names, numbers as %.17g strings)
--   2 ro      STRING packed roster: candidates in (worker id bytes, dp rank) order. u32 n, then the n
--                    slots (u32 each, one column for a single bulk unpack), then n fixed RW-byte records (RREC: slot u32, rid u32, rank u32, max_num_batched_tokens f64,
--                    total_kv_blocks f64, kv_events i8 (-1/0/1), worker id offset u32, length u32, url
--                    offset u32, length u32), then the strings area (offsets are relative to its start).
--   3 wk      HASH   worker id -> cmsgpack {url, dp, tkv, mnbt, kve, rids{}, slots{}}
--   4 seen    HASH   worker id -> last heartbeat/event, ms
--   5 lv      STRING loads, 24 bytes per roster candidate, same order: prefill tokens, decode blocks,
--                    requests (f64 each; a rank id is alive iff it is in the roster)
--   6 fence   HASH   "e"..rid epoch, "i"..rid last event id (20 zero-padded digits), "g"..rid degraded
--   7 sc      HASH   counters: "slot", "rid", "sgen", "rc" (reclaim cursor), "h"..slot held blocks
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
-- Bucket suffixes are the only strings appended in Lua; every key stays under the pool's hash tag.

local K_CFG, K_ROSTER, K_WK, K_SEEN, K_LD, K_FENCE, K_SC, K_ORPH, K_ND, K_DEAD, K_LS, K_LX, K_SS, K_SX, K_E, K_G, K_S, K_WZ =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12],
  KEYS[13], KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18]
local K_HC, K_HU, K_SY = KEYS[19], KEYS[20], KEYS[21]

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

-- New knobs are appended (ua: unhealthy_after, ubo: unhealthy_backoff_ms); a pool written before them reads 0
-- (health tracking off) until its config is written again.
local CFG_FIELDS = {'bs', 'osc', 'hw', 'dw', 'pls', 'decay', 'rw', 'temp', 'bpf', 'bdf', 'kve', 'attl', 'pttl', 'sttl', 'lttl', 'wttl', 'mpt',
  'ua', 'ubo'}
local CFG_FMT = '>' .. string.rep('d', #CFG_FIELDS)   -- cfg field 'bin': every knob as f64, CFG_FIELDS order

-- cfg_get returns the pool's knobs as numbers, or nil when the pool does not exist.
local function cfg_get()
  local c = {}
  local b = redis.call('HGET', K_CFG, 'bin')
  if b then
    local n = #b / 8
    local v
    if n >= #CFG_FIELDS then v = {struct.unpack(CFG_FMT, b)} else v = {struct.unpack('>' .. string.rep('d', n), b)} end
    for i, f in ipairs(CFG_FIELDS) do if i <= n then c[f] = v[i] else c[f] = 0 end end
    return c
  end
  local v = redis.call('HMGET', K_CFG, unpack(CFG_FIELDS))
  if not v[1] then return nil end
  for i, f in ipairs(CFG_FIELDS) do c[f] = tonumber(v[i]) or 0 end
  return c
end

-- Packed roster (KEYS[2]) and loads (KEYS[5]); see the key list above.
local RREC, RW = '>I4I4I4ddbI4I4I4I4', 45
local ZERO24 = string.rep('\0', 24)
local ROS = nil
local function ros()
  if not ROS then
    local s = redis.call('GET', K_ROSTER)
    if not s then ROS = {s = '', n = 0, rb = 5, str = 5}
    else local n = struct.unpack('>I4', s, 1); ROS = {s = s, n = n, rb = 5 + 4 * n, str = 5 + 4 * n + n * RW} end
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
  local wo, wl = struct.unpack('>I4I4', R.s, R.rb + (i - 1) * RW + 29)
  return string.sub(R.s, R.str + wo, R.str + wo + wl - 1)
end
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
  local stride = nil
  while i < n do
    local k = n - i
    if k > 128 then k = 128 end
    local fmt = '>' .. string.rep(rec .. string.rep('x', skip), k - 1) .. rec
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
  return bulk_unpack(R.s, 5, R.n, 'I4', 1, 0)
end
-- rid_index returns the roster index (1-based) of rank id rid, or nil (the rank is gone).
local function rid_index(rid)
  local R = ros()
  local key = struct.pack('>I4', rid)
  local base = R.rb + 4
  local from = base
  while true do
    local p = string.find(R.s, key, from, true)
    if not p or p >= R.str then return nil end
    if (p - base) % RW == 0 then return (p - base) / RW + 1 end
    from = p + 1
  end
end
-- ld_read / ld_add: one candidate's loads (prefill tokens, decode blocks, requests).
local function ld_read(i)
  local off = (i - 1) * 24
  local v = redis.call('GETRANGE', K_LD, off, off + 23)
  if #v ~= 24 then return 0, 0, 0 end
  return struct.unpack('>ddd', v)
end
local function ld_add(i, a, b, c)
  local p, d, r = ld_read(i)
  redis.call('SETRANGE', K_LD, (i - 1) * 24, struct.pack('>ddd', p + a, d + b, r + c))
end

-- roster_rebuild writes the candidate list from wz + wk (wkc: optional cache of changed worker records),
-- carrying each surviving rank id's loads to its new position (new rank ids start at 0).
local function roster_rebuild(wkc)
  local old = ros()
  local lds = redis.call('GET', K_LD) or ''
  local oldl = {}
  for i = 1, old.n do
    local rid = struct.unpack('>I4', old.s, old.rb + (i - 1) * RW + 4)
    oldl[rid] = string.sub(lds, (i - 1) * 24 + 1, i * 24)
  end
  local ids = redis.call('ZRANGE', K_WZ, 0, -1)
  local recs, strs, lv, sl = {}, {}, {}, {}
  local soff = 0
  for _, id in ipairs(ids) do
    local w = wkc and wkc[id]
    if not w then w = cmsgpack.unpack(redis.call('HGET', K_WK, id)) end
    for r = 1, w[2] do
      local rid = w[6][r]
      sl[#sl + 1] = struct.pack('>I4', w[7][r])
      recs[#recs + 1] = struct.pack(RREC, w[7][r], rid, r - 1, w[4], w[3], w[5], soff, #id, soff + #id, #w[1])
      strs[#strs + 1] = id .. w[1]
      soff = soff + #id + #w[1]
      local l = oldl[rid]
      if not l or #l ~= 24 then l = ZERO24 end
      lv[#lv + 1] = l
    end
  end
  if #recs == 0 then
    redis.call('DEL', K_ROSTER, K_LD)
    ROS = {s = '', n = 0, rb = 5, str = 5}
  else
    local n = #recs
    local s = struct.pack('>I4', n) .. table.concat(sl) .. table.concat(recs) .. table.concat(strs)
    redis.call('SET', K_ROSTER, s)
    redis.call('SET', K_LD, table.concat(lv))
    ROS = {s = s, n = n, rb = 5 + 4 * n, str = 5 + 4 * n + n * RW}
  end
end

-- end_lease releases a lease's remaining load and its session hold at time t (memory: endLease).
local function end_lease(id, l, t)
  local i = rid_index(l[1])
  if i then ld_add(i, 0 - l[2], 0 - l[3], -1) end
  redis.call('HDEL', K_LS, id)
  redis.call('ZREM', K_LX, id)
  if l[5] ~= '' then
    local sp = redis.call('HGET', K_SS, l[5])
    if sp then
      local s = cmsgpack.unpack(sp)
      if s[3] == l[6] and s[4] > 0 then
        s[4] = s[4] - 1
        if s[4] == 0 then
          s[5] = t
          redis.call('ZADD', K_SY, t, l[5])
        end
        redis.call('HSET', K_SS, l[5], cmsgpack.pack(s))
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
      end_lease(id, l, l[4])
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

local EC = {}
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

-- Counter deltas (held, orphans, non-device) per slot, flushed at the end.
local CNT = {h = {}, o = {}, n = {}}
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
          local sl, exp = struct.unpack('>I4d', s, off)
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
      if s[4] == 0 and now >= s[5] + ttl then redis.call('HDEL', K_SS, id) end
    end
    redis.call('ZREM', K_SY, id)
  end
end

-- new_slot allocates a fresh index slot id.
local function new_slot() return redis.call('HINCRBY', K_SC, 'slot', 1) end
