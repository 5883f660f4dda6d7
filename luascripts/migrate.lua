-- migrate.lua — one bounded step of `kvrouter pool migrate`: bring a pool written by the previous key
-- layout to this one. Layout 1 (every pool written before versions were recorded: no cfg field 'layout')
-- keeps the same keys and encodings as layout 2, so its one step records the version; a later layout
-- that changes data appends its conversion here as further steps, each bounded, resumed by the caller
-- until 'done'. Pools of any other version (or layout-1 pools without the packed knobs 'bin', written by
-- a much older version) are refused: recreate them.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: none.
-- Reply: {'unknown_pool'} | {'done', from layout} (the pool is in this layout now; from = LAYOUT when it
--   already was) | {'more', from layout} (call again) | {'unsupported', found layout}.
-- Complexity: O(1).
bind(KEYS)
local got = redis.call('HMGET', K_CFG, 'bin', 'layout')
local bin, found = got[1], got[2]
if found == LAYOUT then return {'done', LAYOUT} end
if not found and not bin and redis.call('EXISTS', K_CFG) == 0 then return {'unknown_pool'} end
if found or not bin then return {'unsupported', found or '1'} end
redis.call('HSET', K_CFG, 'layout', LAYOUT)
return {'done', '1'}
