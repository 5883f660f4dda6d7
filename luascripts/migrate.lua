-- migrate.lua — one bounded step of `kvrouter pool migrate`: bring a pool written by an earlier key layout
-- to this one (3). Layout 1 (every pool written before versions were recorded: no cfg field 'layout') keeps
-- the same keys and encodings as layout 2; layout 3 adds the load order (lz, lc), which migrate_lz builds
-- from the roster and lv (with lp, the prefill order), MIGRATE_CHUNK candidates per call with its cursor in
-- sc field 'mlz', and the
-- last-seen order sz, which migrate_sz builds from wz and seen (cursor 'msz'). The caller
-- resumes until 'done'; until then the pool still records its old layout, so every other operation answers
-- layout_mismatch and nothing moves the roster or the loads under the cursor. Pools of any other version
-- (or layout-1 pools without the packed knobs 'bin', written by a much older version) are refused:
-- recreate them.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: none.
-- Reply: {'unknown_pool'} | {'done', from layout} (the pool is in this layout now; from = LAYOUT when it
--   already was) | {'more', from layout} (call again) | {'unsupported', found layout}.
-- Complexity: O(MIGRATE_CHUNK · log W) per call (one GETRANGE of lv, a ZADD per 256 members; or one ZRANGE
-- of wz, one HMGET of seen, one ZADD).
bind(KEYS)
local MIGRATE_CHUNK = 512

-- migrate_lz adds the next MIGRATE_CHUNK candidates' members to lz (emptied first on the first step) and
-- reports whether every candidate is in (sc 'mlz' = 'done' until the migration ends).
local function migrate_lz()
  local at = redis.call('HGET', K_SC, 'mlz')
  if at == 'done' then return true end
  local cur = tonumber(at or '')
  if not cur then
    redis.call('DEL', K_LZ, K_LC, K_LP)   -- a fresh start: nothing half-built survives
    cur = 0
  end
  local R = ros()
  local to = cur + MIGRATE_CHUNK
  if to > R.n then to = R.n end
  local lds = to > cur and redis.call('GETRANGE', K_LD, cur * 24, to * 24 - 1) or ''
  local zero = string.rep('\0', 24)
  local members = {}
  for i = cur + 1, to do
    local l = string.sub(lds, (i - cur - 1) * 24 + 1, (i - cur) * 24)
    if #l ~= 24 then l = zero end
    members[#members + 1] = l .. LZ.rck(i)
  end
  LZ.add(members)
  if to >= R.n then
    redis.call('HSET', K_SC, 'mlz', 'done')
    return true
  end
  redis.call('HSET', K_SC, 'mlz', to)
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
  if #ids < MIGRATE_CHUNK then return true end
  redis.call('HSET', K_SC, 'msz', cur + #ids)
  return false
end

local got = redis.call('HMGET', K_CFG, 'bin', 'layout')
local bin, found = got[1], got[2]
if found == LAYOUT then return {'done', LAYOUT} end
if not found and not bin and redis.call('EXISTS', K_CFG) == 0 then return {'unknown_pool'} end
if (found and found ~= '2') or not bin then return {'unsupported', found or '1'} end
local from = found or '1'
if not migrate_lz() or not migrate_sz() then return {'more', from} end
redis.call('HDEL', K_SC, 'mlz', 'msz')
redis.call('HSET', K_CFG, 'layout', LAYOUT)
return {'done', from}
