-- lease.lua — end or renew one request's lease: prefill_done (release its prefill tokens), done (release
-- the whole lease), renew (extend to now + lease_ttl_ms). Idempotent. Expired leases are released first.
--
-- KEYS: only the pool keys it touches, in lib.lua's order (luascripts.Lease.Keys: cfg ro lv sc ls lx ss sy
-- lz lp tc lzn; the library's wrapper spreads them to their lib.lua positions, keys_spread, before the
-- body starts with bind(KEYS)).
-- ARGV: [1] op: 'prefill_done' | 'done' | 'renew'  [2] now, ms  [3] request id.
-- Reply: {'unknown_pool'} | {'layout_mismatch', found layout} | {'ok', 1 if the lease existed else 0}.
-- Complexity: O(expired leases) + O(1): the rank's loads are found by the lease's roster-index hint
-- (rid_locate: two GETRANGEs), the whole roster is read only when the roster changed since the booking.
-- prefill_done of a cost_model ttft lease calibrates its rank and the pool once (TT.calibrate: one HMGET
-- and one HSET of tc), measured = (now − decision) / 1000 s; a rank removed since calibrates nothing.
bind(KEYS)
local op, now, id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
-- Every op reads the knobs (one HMGET, as pool_check's HGET): renew needs lease_ttl_ms, prefill_done the
-- cost model's, and the loads writes of done and prefill_done score lz with them (LZ.use: no second read).
local cfg, refused = cfg_get()
if not cfg then return refused end
LZ.use(cfg)
release_expired(now, ARGV[2])
local lp = redis.call('HGET', K_LS, id)
if not lp then return {'ok', 0} end
local l = cmsgpack.unpack(lp)
if op == 'prefill_done' then
  local i = rid_locate(l[L.RID], l[L.IDX])
  if i then ld_add(i, 0 - l[L.PREFILL], 0, 0, l[L.CK]) end
  l[L.PREFILL] = 0
  if l[L.T] then
    if i then TT.calibrate(cfg, l[L.RID], l[L.X1], l[L.X2], (now - l[L.T]) / 1000) end
    l[L.X1], l[L.X2], l[L.T] = nil, nil, nil   -- once: prefill_done is idempotent
  end
  redis.call('HSET', K_LS, id, cmsgpack.pack(l))
elseif op == 'done' then
  end_lease(id, l, now)
else
  l[L.EXPIRY] = now + cfg.lttl
  redis.call('HSET', K_LS, id, cmsgpack.pack(l))
  redis.call('ZADD', K_LX, num(l[L.EXPIRY]), id)
  lx_added(l[L.EXPIRY])
end
return {'ok', 1}
