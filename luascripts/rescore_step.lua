-- rescore_step.lua — one bounded step of a rescoring of the load order started by put_pool (lib.lua
-- "Rescoring in steps"): about ARGV[2] more lz members are added to lzn with the pending knobs' scores;
-- the step that completes the walk switches (lzn becomes lz, the pending knobs the pool's). A step of
-- another generation than the rescoring under way (a later put_pool restarted or cancelled it) does nothing.
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] generation (put_pool's {'rescoring', generation} reply)  [2] members per step (ZSCAN COUNT, ≥ 1).
-- Reply: {'more'} | {'done'} (switched by this step, or no rescoring of that generation is under way
--   any more: switched, cancelled or superseded) | {'unknown_pool'} | {'layout_mismatch', found layout}.
-- Complexity: O(n log W) for n = ARGV[2] (ZSCAN of about n members, as many ZADDs; at most 10·n empty
-- buckets visited); the switching step adds O(knobs) (UNLINK of the old lz and RENAME are O(1) here).
bind(KEYS)
local gen, n = tonumber(ARGV[1]), tonumber(ARGV[2])
if not gen or not n or n < 1 or n % 1 ~= 0 then return redis.error_reply('ERR rescore_step: bad arguments') end
local refused = pool_check()
if refused then return refused end
if not LZ.pending() or tonumber(redis.call('HGET', K_CFG, 'rgen')) ~= gen then return {'done'} end
if LZ.step(n) then return {'done'} end
return {'more'}
