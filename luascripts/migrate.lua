-- migrate.lua — one bounded step of `kvrouter pool migrate`: bring a pool written by an earlier key layout
-- to this one (3). Layout 1 (every pool written before versions were recorded: no cfg field 'layout') keeps
-- the same keys and encodings as layout 2; layout 3 adds the load order (lz, lc), which migrate_lz builds
-- from the roster and lv, MIGRATE_CHUNK candidates per call with its cursor in sc field 'mlz'. The caller
-- resumes until 'done'; until then the pool still records its old layout, so every other operation answers
-- layout_mismatch and nothing moves the roster or the loads under the cursor. Pools of any other version
-- (or layout-1 pools without the packed knobs 'bin', written by a much older version) are refused:
-- recreate them.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: none.
-- Reply: {'unknown_pool'} | {'done', from layout} (the pool is in this layout now; from = LAYOUT when it
--   already was) | {'more', from layout} (call again) | {'unsupported', found layout}.
-- Complexity: O(MIGRATE_CHUNK · log W) per call (one GETRANGE of lv, a ZADD per 256 members).
bind(KEYS)
local MIGRATE_CHUNK = 512

-- migrate_lz adds the next MIGRATE_CHUNK candidates' members to lz (emptied first on the first step) and
-- reports whether every candidate is in.
local function migrate_lz()
  local cur = tonumber(redis.call('HGET', K_SC, 'mlz') or '')
  if not cur then
    redis.call('DEL', K_LZ, K_LC)   -- a fresh start: nothing half-built survives
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
    redis.call('HDEL', K_SC, 'mlz')
    return true
  end
  redis.call('HSET', K_SC, 'mlz', to)
  return false
end

local got = redis.call('HMGET', K_CFG, 'bin', 'layout')
local bin, found = got[1], got[2]
if found == LAYOUT then return {'done', LAYOUT} end
if not found and not bin and redis.call('EXISTS', K_CFG) == 0 then return {'unknown_pool'} end
if (found and found ~= '2') or not bin then return {'unsupported', found or '1'} end
local from = found or '1'
if not migrate_lz() then return {'more', from} end
redis.call('HSET', K_CFG, 'layout', LAYOUT)
return {'done', from}
