-- report_forward.lua — record the outcome of one forward to a worker in its shared health (SPEC §7.2);
-- the rules are statestore/health.go's (healthRec.report), mirrored here step by step.
--
-- KEYS: the pool's key list (see lib.lua; health lives in hc and hu).
-- ARGV: [1] now, ms  [2] worker id  [3] ok: '1' (the forward succeeded) | '0' (it failed: 5xx, timeout,
--       connect failure)  [4] back-off cap, a multiple of unhealthy_backoff_ms (statestore.MaxBackoffFactor).
-- Reply: {'unknown_pool'} | {'layout_mismatch', found layout} | {'unknown_worker'}
--   | {'ok', consecutive_failures, unhealthy_until_ms, probe_until_ms, backoff_ms, unhealthy_after}
--   (times in ms, 0 = unset; unhealthy_after is the pool's knob, for the state the caller derives).
-- Complexity: O(1): one HEXISTS, at most one HINCRBY/HDEL on hc and one HGET/HSET/HDEL on hu.
bind(KEYS)
local now, wid, ok, capf = tonumber(ARGV[1]), ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local cfg, refused = cfg_get()
if not cfg then return refused end
if redis.call('HEXISTS', K_WK, wid) == 0 then return {'unknown_worker'} end
if ok then
  -- A success resets the worker to healthy, whatever its state.
  redis.call('HDEL', K_HC, wid)
  redis.call('HDEL', K_HU, wid)
  return {'ok', 0, 0, 0, 0, cfg.ua}
end
local fails = redis.call('HINCRBY', K_HC, wid, 1)
local u, p, b = 0, 0, 0
local rec = redis.call('HGET', K_HU, wid)
if rec then u, p, b = struct.unpack('>ddd', rec) end
if cfg.ua > 0 then
  if u == 0 then
    if fails >= cfg.ua then
      -- The K-th failure in a row: unhealthy for one base back-off.
      b = cfg.ubo
      u, p = now + b, 0
      redis.call('HSET', K_HU, wid, struct.pack('>ddd', u, p, b))
    end
  elseif now >= u then
    -- Half-open or probing: the probe (or a late forward) failed; the back-off doubles, capped.
    b = math.min(2 * b, capf * cfg.ubo)
    u, p = now + b, 0
    redis.call('HSET', K_HU, wid, struct.pack('>ddd', u, p, b))
  end
  -- (inside the window: a late report of a forward made before the mark only counts)
end
return {'ok', fails, u, p, b, cfg.ua}
