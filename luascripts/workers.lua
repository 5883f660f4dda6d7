-- workers.lua — one page of a pool's workers, in id order (byte order), with loads per rank (expired
-- leases are released first).
--
-- KEYS: the pool's key list (see lib.lua; the body starts with bind(KEYS)).
-- ARGV: [1] now, ms  [2] after: list the workers whose id sorts after this one ('' = from the first)
--       [3] limit: most workers in the page (>= 1)  [4] max ranks: the page stops before a worker whose
--       ranks would take it past this many, unless it is the page's first (statestore: limit <=
--       MaxWorkersPage, max ranks = MaxWorkersPageRanks; the memory store applies the same rule).
-- Reply: {'unknown_pool'} | {'layout_mismatch', found layout} |
--        {'ok', next ('' = no worker follows, else the page's last id: the cursor for the next page),
--         recs: the page's roster records (lib.lua's RREC, RW bytes each, candidate order: a worker's ranks
--               are consecutive, dp rank 0 first; its string offsets are not meaningful here),
--         loads: 24 bytes per record, same order (lv's bytes: prefill tokens, decode blocks, requests, f64),
--         {url per worker}, {last_seen ms per worker | nil}, {consecutive failures per worker | nil},
--         {hu's '>ddd' per worker | nil}, {epoch, last event id, degraded per rank: 3 per record | nil},
--         {held blocks per rank | nil}, {tc's '>dddddd' per rank | nil}, {worker id per worker},
--         dead slots awaiting reclamation (the pool's, LLEN dead)}; a field array is empty when its hash
--         does not exist (every field absent).
--        statestore/redis_workers.go decodes it (decodeWorkersPage; RREC mirrored by rosterRec).
-- Complexity: O(expired leases) (release_expired, amortised: each lease is released once) + O(log W) roster
-- reads to find the page's first candidate + O(ranks listed) for the page: one GETRANGE of loads per roster
-- chunk the page touches (CH = 64 candidates), 4 HMGETs for the whole page (seen, fence, sc, tc; EXISTS
-- first) and HLEN + HGETALL or HMGET for each of hc and hu (whichever reads less: they hold only failing
-- workers), and per rank one struct.unpack and five field names. The reply is flat (bytes and arrays of strings): no nested table per worker or rank,
-- no reply value converted in Lua: Go parses the stored strings and bytes (docs/PERFORMANCE.md "Per-call
-- bounds at 4,096 workers (branch wlist)").
bind(KEYS)
local now, after, limit, rmax = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local refused = pool_check()
if refused then return refused end
release_expired(now, ARGV[1])
local R = ros()

-- the page's first candidate: the first whose worker id sorts after `after` (lib.lua's wid_lt: byte order)
local lo, hi = 1, R.n + 1
if after ~= '' then
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if wid_lt(after, rwid(mid)) then hi = mid else lo = mid + 1 end
  end
end

-- Walk the roster from candidate lo: whole workers (a worker's ranks are consecutive, rank 0 first), at most
-- limit of them and rmax ranks unless the page has one worker. A worker is taken as its rank 0 is met and
-- dropped again (with the ranks walked so far) as soon as it takes the page past rmax: no look-ahead, and
-- at most rmax + 1 ranks walked beyond the page's first worker. Per rank: the HMGET field names of its
-- fence, held blocks and calibration.
local wids, urls, ff, hf, tf = {}, {}, {}, {}, {}
local nxt, nr, nw, w0 = '', 0, 0, 0   -- ranks taken, workers taken, ranks before the last worker
local i, full = lo, false
while i <= R.n and not full do
  local c, j = rloc(i)
  local C = rch(c)
  while j <= C.n do
    local off = C.rb + (j - 1) * RW
    local slot, rid, rank = struct.unpack('>I4I4I4', C.s, off)
    if rank == 0 then   -- a new worker
      if nw == limit then
        nxt, full = wids[nw], true
        break
      end
      local wo, wl, uo, ul = struct.unpack('>I4I4I4I4', C.s, off + ROFF.WID)
      nw, w0 = nw + 1, nr
      wids[nw], urls[nw] = string.sub(C.s, C.str + wo, C.str + wo + wl - 1), string.sub(C.s, C.str + uo, C.str + uo + ul - 1)
    end
    if nw > 1 and nr >= rmax then   -- this worker does not fit: drop it, the page ends before it
      for x = nr, w0 + 1, -1 do ff[3 * x - 2], ff[3 * x - 1], ff[3 * x], hf[x], tf[x] = nil, nil, nil, nil, nil end
      wids[nw], urls[nw] = nil, nil
      nw, nr = nw - 1, w0
      nxt, full = wids[nw], true
      break
    end
    local r = string.format('%d', rid)   -- (format: ~40 % cheaper than '' .. rid, Lua's '%.14g')
    nr = nr + 1
    ff[3 * nr - 2], ff[3 * nr - 1], ff[3 * nr] = 'e' .. r, 'i' .. r, 'g' .. r
    hf[nr], tf[nr] = string.format('h%d', slot), r
    i, j = i + 1, j + 1
  end
end
if nw == 0 then return {'ok', '', '', '', {}, {}, {}, {}, {}, {}, {}, {}, redis.call('LLEN', K_DEAD)} end

-- the page is candidates lo .. lo + nr - 1: its records and loads, one slice and one GETRANGE per chunk
local recs, loads = {}, {}
i = lo
while i < lo + nr do
  local c, j = rloc(i)
  local C = rch(c)
  local m = math.min(C.n - j + 1, lo + nr - i)   -- candidates of the page in this chunk
  recs[#recs + 1] = string.sub(C.s, C.rb + (j - 1) * RW, C.rb + (j - 1 + m) * RW - 1)
  local v = redis.call('GETRANGE', lv_ckey(c), istr((j - 1) * 24), istr((j - 1 + m) * 24 - 1))
  if #v ~= m * 24 then v = string.rep(zl(), m) end   -- a missing loads chunk reads as zero loads
  loads[#loads + 1] = v
  i = i + m
end

-- hmget_all: HMGET of many fields, in calls of at most 4,000 (unpack's stack limit); false for a missing one.
-- {} (every field missing) when the hash does not exist: hc, hu (health) and tc (calibration) are empty in
-- a healthy pool without cost_model ttft, and one EXISTS is cheaper than a page of fields.
local function hmget_all(key, fields)
  if redis.call('EXISTS', key) == 0 then return {} end
  local res = {}
  for from = 1, #fields, 4000 do
    local to = from + 3999
    if to > #fields then to = #fields end
    local v = redis.call('HMGET', key, unpack(fields, from, to))
    for x = 1, #v do res[from + x - 1] = v[x] end
  end
  return res
end
-- hget_sparse: hmget_all for a hash of few entries (hc, hu: only the workers with failed forwards): when it
-- holds at most half as many entries as there are fields, one HGETALL and a local look-up per field (a
-- page's HMGET of 64 absent fields costs more than the whole hash of a healthy pool).
local function hget_sparse(key, fields)
  local n = redis.call('HLEN', key)
  if n == 0 then return {} end
  if 2 * n > #fields then return hmget_all(key, fields) end
  local all, m, res = redis.call('HGETALL', key), {}, {}
  for x = 1, #all, 2 do m[all[x]] = all[x + 1] end
  for x = 1, #fields do res[x] = m[fields[x]] or false end
  return res
end
return {'ok', nxt, table.concat(recs), table.concat(loads), urls, hmget_all(K_SEEN, wids), hget_sparse(K_HC, wids),
  hget_sparse(K_HU, wids), hmget_all(K_FENCE, ff), hmget_all(K_SC, hf), hmget_all(K_TC, tf), wids,
  redis.call('LLEN', K_DEAD)}
