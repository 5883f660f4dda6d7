-- migrate.lua — one bounded step of `kvrouter pool migrate`: bring a pool written by an earlier key layout
-- to this one (7), in place (a pool of layouts 1–5 is first moved to layout 6's hash tag by statestore,
-- redis_layout.go moveLegacyKeys: layout 6 changed key names only). Layouts 3, 4, 5 and 6 → 7 convert nothing
-- here: layout 5 only stopped keeping lc (each load's member count in lz; route counts a group with ZCOUNT
-- instead), so the first call deletes lc (UNLINK: freed in the background; absent in layout 5), and layout 7
-- only lets a pool of few ranks go without its load orders (lib.lua "Load orders only where a route may
-- walk"), which every earlier layout kept: so it records this layout with cfg 'lzk' set and answers done.
-- (Layout 4 added maps that grow, lib.lua lh_params, for pools and slots it creates, which record their
-- bucket counts, sc 'egn', fence 'gn<slot>'; layout 3's have none and keep 16,384 index and 256 engine-map
-- buckets.) Layout 1 (every pool written before versions were recorded: no cfg field 'layout') has layout
-- 2's keys and encodings. Layout 2 → 3 changes data, so the pool is first marked MIGRATING (cfg
-- field 'layout' = '2>3': routers of layout 2 and 3 alike answer layout_mismatch until it is done, so
-- nothing writes into a half-converted pool) and its original layout kept in cfg field 'mfrom'; then the
-- conversions in STEPS run in order, each a function doing one bounded slice per call and answering true
-- once its part is converted (cfg field 'mstep': the current one); the last records this layout. Pools of any
-- other version (or layout-1 pools without the packed knobs 'bin', written by a much older version) are
-- refused: recreate them.
-- Steps: migrate_roster (layout 2's one-string roster and loads into chunks), migrate_lz (the load order
-- lz and the prefill order lp, built from the chunks, about MIGRATE_CHUNK candidates per call, cursor in
-- sc field 'mlz'), migrate_sz (the last-seen order sz from wz and seen, cursor 'msz').
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: none.
-- Reply: {'unknown_pool'} | {'done', from layout} (the pool is in this layout now; from = LAYOUT when it
--   already was) | {'more', from layout} (call again) | {'unsupported', found layout}.
-- Complexity: O(CH) per call (CH = 64 roster candidates; O(dp) for a worker of more ranks) for the roster,
-- O(MIGRATE_CHUNK · log W) for the orders (whole chunks of at most CH candidates; one ZRANGE of wz, one
-- HMGET of seen and one ZADD for sz).
bind(KEYS)
LZ_KEPT = true   -- a migrated pool keeps its load orders (migrate_lz builds them; layouts 3-6 kept them)
local MIGRATING = '2>3'
local MIGRATE_CHUNK = 512

-- migrate_roster converts layout 2's packed roster `ro` (u32 n ‖ n slots u32 ‖ n RW-byte records ‖
-- strings, one string) and loads `lv` (24 bytes per candidate, one string) into roster and loads chunks
-- (lib.lua "Chunked roster"), CH candidates per call read with GETRANGE: each call writes one chunk and
-- appends its entry to the new directory, built in ro:m while `ro` still holds the old roster; sc field
-- 'mro' counts the candidates converted. The last call renames ro:m to ro and deletes lv. Loads are
-- carried (zero if lv did not match the roster, as layout 2's route read it). Returns true when done.
local function migrate_roster()
  local hdr = redis.call('GETRANGE', K_ROSTER, 0, 3)
  local n = (#hdr == 4) and struct.unpack('>I4', hdr) or 0
  local done = tonumber(redis.call('HGET', K_SC, 'mro') or '0')
  local tmp = K_ROSTER .. ':m'
  if done < n then
    if done == 0 then
      local era = new_stamp()
      redis.call('SET', tmp, string.char(#era) .. era)
    end
    local m = math.min(CH, n - done)
    local rb = 4 + 4 * n      -- 0-based offset of the first record
    local str = rb + n * RW   -- 0-based offset of the strings area
    local recs = redis.call('GETRANGE', K_ROSTER, rb + done * RW, rb + (done + m) * RW - 1)
    local lv = nil
    if redis.call('STRLEN', K_LD) == 24 * n then lv = redis.call('GETRANGE', K_LD, done * 24, (done + m) * 24 - 1) end
    -- The slice's worker ids and urls: one GETRANGE of the span of the strings area they occupy (layout 2
    -- appended a worker's strings at registration, so a slice's strings are usually close together; at
    -- worst the span is the whole area, ~30 bytes per worker), not two per candidate.
    local f = {}
    local lo, hi = nil, nil   -- 0-based span of the strings area holding the slice's strings
    for j = 1, m do
      f[j] = {struct.unpack(RREC, recs, (j - 1) * RW + 1)}
      local wo, wl, uo, ul = f[j][7], f[j][8], f[j][9], f[j][10]
      local a, b = math.min(wo, uo), math.max(wo + wl, uo + ul)
      if not lo or a < lo then lo = a end
      if not hi or b > hi then hi = b end
    end
    local area = (hi > lo) and redis.call('GETRANGE', K_ROSTER, str + lo, str + hi - 1) or ''
    local cands = {}
    for j = 1, m do
      local x = f[j]
      local wo, wl, uo, ul = x[7] - lo, x[8], x[9] - lo, x[10]
      cands[j] = {x[1], x[2], x[3], x[4], x[5], x[6], string.sub(area, wo + 1, wo + wl), string.sub(area, uo + 1, uo + ul),
        lv and string.sub(lv, 24 * j - 23, 24 * j) or zl()}
    end
    local e = chunk_new(cands, 1, m)
    redis.call('APPEND', tmp, dir_entry(e.cid, e.n, e.fw))
    redis.call('HSET', K_SC, 'mro', done + m)
    if done + m < n then return false end
  end
  if n > 0 then
    redis.call('RENAME', tmp, K_ROSTER)
    redis.call('HSET', K_SC, 'rv', new_stamp())
  else
    redis.call('DEL', K_ROSTER, tmp)
    redis.call('HDEL', K_SC, 'rv')
  end
  redis.call('DEL', K_LD)
  redis.call('HDEL', K_SC, 'mro')
  lv_replaced()
  return true
end

-- migrate_lz adds the members of the next whole roster chunks (about MIGRATE_CHUNK candidates) to lz and
-- lp (emptied on the first call, and any lc deleted: nothing half-built survives a restarted migration)
-- and reports whether every candidate is in. Runs after migrate_roster, so it reads the chunks.
local function migrate_lz()
  local c = tonumber(redis.call('HGET', K_SC, 'mlz') or '')
  if not c then
    redis.call('DEL', K_LZ, K_LC, K_LP)
    c = 0
  end
  local R = ros()
  local members = {}
  while c < R.k and #members < MIGRATE_CHUNK do
    c = c + 1
    LZ.chunk_members(R, c, members)
  end
  LZ.add(members)
  if c >= R.k then
    redis.call('HDEL', K_SC, 'mlz')
    return true
  end
  redis.call('HSET', K_SC, 'mlz', c)
  return false
end

-- migrate_sz adds the next MIGRATE_CHUNK workers (wz order) to sz, scored by their seen value (0 when none,
-- as route's liveness test reads a missing one), and reports whether every worker is in.
local function migrate_sz()
  local cur = tonumber(redis.call('HGET', K_SC, 'msz') or '')
  if not cur then
    redis.call('DEL', K_SZ)
    cur = 0
  end
  local ids = redis.call('ZRANGE', K_WZ, cur, cur + MIGRATE_CHUNK - 1)
  if #ids > 0 then
    local v = redis.call('HMGET', K_SEEN, unpack(ids))
    local args = {}
    for j, id in ipairs(ids) do
      args[#args + 1] = tonumber(v[j]) or 0
      args[#args + 1] = id
    end
    redis.call('ZADD', K_SZ, unpack(args))
  end
  if #ids < MIGRATE_CHUNK then
    redis.call('HDEL', K_SC, 'msz')
    return true
  end
  redis.call('HSET', K_SC, 'msz', cur + #ids)
  return false
end

local STEPS = {migrate_roster, migrate_lz, migrate_sz}

local got = redis.call('HMGET', K_CFG, 'bin', 'layout', 'mfrom')
local bin, found, from = got[1], got[2], got[3]
if found == LAYOUT then return {'done', LAYOUT} end
if found == '3' or found == '4' or found == '5' or found == '6' then
  redis.call('UNLINK', K_LC)
  redis.call('HSET', K_CFG, 'layout', LAYOUT, 'lzk', '1')
  return {'done', found}
end
if not found and not bin and redis.call('EXISTS', K_CFG) == 0 then return {'unknown_pool'} end
if not found then
  if not bin then return {'unsupported', '1'} end
  found, from = '2', '1'   -- layout 1 holds layout 2's data
end
if found == '2' then
  from = from or '2'
  redis.call('HSET', K_CFG, 'layout', MIGRATING, 'mfrom', from, 'mstep', 1)
  found = MIGRATING
end
if found ~= MIGRATING then return {'unsupported', found} end
local at = tonumber(redis.call('HGET', K_CFG, 'mstep') or '1')
if STEPS[at]() then
  at = at + 1
  redis.call('HSET', K_CFG, 'mstep', at)
end
if at <= #STEPS then return {'more', from} end
redis.call('HSET', K_CFG, 'layout', LAYOUT, 'lzk', '1')
redis.call('HDEL', K_CFG, 'mfrom', 'mstep')
return {'done', from}
