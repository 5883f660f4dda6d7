#!lua name=kvrouter_floor
-- decision.lua — scripts/redis-floor.sh's functions: a no-op, and the least a booked decision does in Redis
-- (SPEC §9: route then done, each one atomic call), with none of kvrouter's logic, so its Redis CPU is a floor
-- under any design that books inside Redis.
--   kvrouter_floor_nop    returns at once
--   kvrouter_floor_route  KEYS: kvrouter's 26-key list (see redis-floor.sh); ARGV: [1] a 64-block prompt
--                         (512 bytes), [2] lease id, [3] lease record, [4] expiry ms, [5] load-order member,
--                         then fillers to route's 19 arguments. 11 commands: 6 index HGETs (a jump search
--                         over 64 blocks), GET of the pool's loads, SETRANGE (the booking), the lease HSET
--                         and its expiry ZADD, the load order's ZREM + ZADD.
--   kvrouter_floor_done   KEYS: 13 (done's count; lv, ls, sx, lz first); ARGV: [1] lease id, [2] member.
--                         6 commands: HGET and HDEL of the lease, ZREM of its expiry, SETRANGE of the loads,
--                         the load order's ZREM + ZADD.
--   kvrouter_floor_setup  KEYS as route's; ARGV[1] the prompt: 6 index buckets of 61 entries (a 1 M-entry
--                         index's bucket size) holding its first 6 blocks, a 64-worker loads string, a
--                         64-member load order.
-- The least a decision that *chooses* does (docs/PERFORMANCE.md "Twentieth session"): the bare decision above
-- issues a decision's commands but decides nothing. These add the least logic any design that decides inside
-- Redis needs — find the holders and their shared prefix, read the candidates' loads, cost them, pick, book,
-- and release — and nothing kvrouter adds (no pool record or layout check, knobs as arguments, no filters,
-- sessions, health, tiers, soft entries, expiry sweeps, tie rule or memos), with only the keys they use:
--   kvrouter_floor_min_setup  KEYS: [1] index bucket prefix, [2] loads, [3] load order; ARGV[1] the prompt
--                         (64 blocks of 8 bytes; none: loads and load order only): every block's index bucket (16,384 by the hash's last two
--                         bytes, as kvrouter) filled to 61 entries, the prompt's first 40 blocks held by
--                         slots 1-4 (a chain shared by 4), a 64-candidate loads string and load order.
--   kvrouter_floor_min_fill   KEYS: [1] index bucket prefix; ARGV: [1] prompts (each 512 bytes), [2] the first
--                         one's number k: the index of a pool of many chains instead of one hot prompt — each
--                         prompt's first 40 blocks held by slots 4k+1..4k+4 (mod 64; no fillers), so 6,250
--                         prompts make the benchmark's 1 M (block, holder) entries in 16,384 buckets of ~15
--                         fields, and routes over them meet Redis's caches as kvrouter's do (internal/bench
--                         FillMinFloor; `kvrouter bench floor --prompts N`). Setup then without a prompt.
--   kvrouter_floor_min_route  KEYS: [1] bucket prefix, [2] loads, [3] load order, [4] leases, [5] lease
--                         expiries; ARGV: [1] prompt, [2] lease id, [3] now ms, [4] prompt tokens, [5] block
--                         size, tokens, [6] prefill weight, [7] request weight. Position 0's holders decoded,
--                         one binary search of the prefix they hold (6 HGETs over 64 blocks after position 0's, each holder
--                         tested with string.find), the least-loaded candidate (ZRANGE 0 0), every
--                         candidate's loads from one GET, cost = w_p·prefill/block + decode + w_r·requests,
--                         the minimum booked (SETRANGE, the load order's ZADD, the lease HSET and its expiry
--                         ZADD). 13 commands. Reply {candidate, overlap blocks, cost as %.17g}.
--   kvrouter_floor_min_done   KEYS: [1] loads, [2] load order, [3] leases, [4] lease expiries; ARGV: [1] lease
--                         id, [2] prefill weight, [3] request weight, [4] block size. The lease read, its
--                         loads subtracted (GETRANGE, SETRANGE, ZADD), the lease deleted (HDEL, ZREM). 6
--                         commands; a lease already gone (the benchmark's clients share one id) is released
--                         from a default record, so every call does the same work.
--   kvrouter_floor_mincmd_route / _done: the same plus the commands kvrouter issues beyond them (11.6 per
--                         decision: see min_route_with), results unused. KEYS: route's 5, then [6] pool record
--                         (a HASH with bin, layout), [7] counters, [8] prefill order, [9..14] six keys EXISTS
--                         reads; done's 4, then [5] pool record, [6] counters, [7] prefill order.
local function floor_nop() return 0 end
local function floor_setup(keys, args)
  local blob = args[1]
  for i = 0, 5 do
    for j = 1, 60 do redis.call('HSET', keys[15] .. i, string.format('%07d', j), string.rep('x', 17)) end
    redis.call('HSET', keys[15] .. i, string.sub(blob, i * 8 + 1, i * 8 + 7), string.rep('y', 17))
  end
  redis.call('SET', keys[5], string.rep('\0', 64 * 24))
  for w = 1, 64 do redis.call('ZADD', keys[22], '0', string.format('%024d', w)) end
  return 1
end
local function floor_route(keys, args)
  local blob, found = args[1], 0
  for i = 0, 5 do
    if redis.call('HGET', keys[15] .. i, string.sub(blob, i * 8 + 1, i * 8 + 7)) then found = found + 1 end
  end
  local loads = redis.call('GET', keys[5])
  redis.call('SETRANGE', keys[5], 24 * found, string.sub(loads, 1, 24))
  redis.call('HSET', keys[11], args[2], args[3])
  redis.call('ZADD', keys[14], args[4], args[2])
  redis.call('ZREM', keys[22], args[5])
  redis.call('ZADD', keys[22], '0', args[5])
  return found
end
local function floor_done(keys, args)
  local lease = redis.call('HGET', keys[2], args[1])
  redis.call('HDEL', keys[2], args[1])
  redis.call('ZREM', keys[3], args[1])
  redis.call('SETRANGE', keys[1], 0, string.rep('\0', 24))
  redis.call('ZREM', keys[4], args[2])
  redis.call('ZADD', keys[4], '0', args[2])
  return lease and 1 or 0
end
-- The minimal decision's load order member and score (see the header): the candidate's 4-byte index, scored
-- by its load key.
local function min_member(c) return struct.pack('>I4', c) end
local function min_score(pls, rw, bs, p, d, r) return string.format('%.17g', pls * p / bs + d + rw * r) end
local MIN_DEPTH, MIN_HOLDERS, MIN_CANDS = 40, 4, 64
-- min_index: prompt number k's index entries, its blocks' 8-byte hashes at blob offset o (0-based): the first
-- MIN_DEPTH held by candidates 4k+1..4k+4 (mod MIN_CANDS), each block in its bucket (16,384 by the hash's last
-- two bytes, field its first 7). With fillers, every bucket the prompt uses is first filled to 61 entries.
local function min_index(prefix, blob, o, k, fillers)
  local v = string.rep('p', 8) .. '\1'
  for j = 0, MIN_HOLDERS - 1 do v = v .. struct.pack('>I4i4', (k * MIN_HOLDERS + j) % MIN_CANDS + 1, 8) end
  for i = 0, (fillers and 64 or MIN_DEPTH) - 1 do
    local a, b = string.byte(blob, o + i * 8 + 7, o + i * 8 + 8)
    local bucket = prefix .. ((a * 256 + b) % 16384)
    if fillers then
      for j = 1, 60 do redis.call('HSET', bucket, string.format('%06d%d', j, i % 10), string.rep('x', 41)) end
    end
    if i < MIN_DEPTH then redis.call('HSET', bucket, string.sub(blob, o + i * 8 + 1, o + i * 8 + 7), v) end
  end
end
local function floor_min_fill(keys, args)
  local blob, k0 = args[1], tonumber(args[2])
  for k = 0, #blob / 512 - 1 do min_index(keys[1], blob, k * 512, k0 + k, false) end
  return #blob / 512
end
local function floor_min_setup(keys, args)
  if args[1] and args[1] ~= '' then min_index(keys[1], args[1], 0, 0, true) end
  redis.call('SET', keys[2], string.rep(struct.pack('>ddd', 0, 0, 0), MIN_CANDS))
  for c = 1, MIN_CANDS do redis.call('ZADD', keys[3], '0', min_member(c)) end
  return 1
end
-- min_route_with: the minimal route; with extra (kvrouter_floor_mincmd_route) it also issues the bookkeeping
-- commands kvrouter's route issues beyond it (MONITOR, twentieth session: the pool record's HMGET, one EXISTS of
-- six usually-absent keys, the lease conflict HEXISTS, the roster and loads stamps' HMGET, the loads stamp's
-- HINCRBY, the load order's ZREM before its ZADD, the prefill order's ZADD), results unused: the commands' cost
-- apart from kvrouter's Lua.
-- MIN_MEMO: prompt position -> its index entry (false: absent), this call's probes; one table kept across
-- calls and emptied by min_route_with, and min_entry a plain function, not a closure made per call: the
-- floor must not pay for what a lean design would not (twentieth session's version made both per call).
local MIN_MEMO = {}
-- min_entry: the index entry of prompt position i (0-based) of blob, buckets under prefix ke, memoized.
local function min_entry(ke, blob, i)
  local e = MIN_MEMO[i]
  if e == nil then
    local a, b = string.byte(blob, i * 8 + 7, i * 8 + 8)
    e = redis.call('HGET', ke .. ((a * 256 + b) % 16384), string.sub(blob, i * 8 + 1, i * 8 + 7))
    MIN_MEMO[i] = e
  end
  return e
end
local function min_route_with(keys, args, extra)
  local blob, lease, now, isl = args[1], args[2], tonumber(args[3]), tonumber(args[4])
  local bs, pls, rw = tonumber(args[5]), tonumber(args[6]), tonumber(args[7])
  local ke = keys[1]
  local nb = #blob / 8
  for i in pairs(MIN_MEMO) do MIN_MEMO[i] = nil end
  local cands, ovs = {}, {}
  local e0 = min_entry(ke, blob, 0)
  if e0 then
    for off = 10, #e0, 8 do
      local key = string.sub(e0, off, off + 3)
      local lo, hi = 1, nb   -- the longest prefix held: positions < lo are held, positions >= hi + 1 are not
      while lo < hi do
        local m = math.floor((lo + hi + 1) / 2)
        local e = min_entry(ke, blob, m - 1)
        if e and string.find(e, key, 10, true) then lo = m else hi = m - 1 end
      end
      local c = struct.unpack('>I4', key)   -- slot = candidate index here (a real store maps slots to candidates)
      cands[#cands + 1], ovs[c] = c, lo
    end
  end
  if extra then
    redis.call('HMGET', keys[6], 'bin', 'layout', 'pbin')
    redis.call('EXISTS', keys[9], keys[10], keys[11], keys[12], keys[13], keys[14])
    redis.call('HEXISTS', keys[4], lease)
    redis.call('HMGET', keys[7], 'rv', 'egn', 'lvs')
  end
  local head = struct.unpack('>I4', redis.call('ZRANGE', keys[3], 0, 0)[1])
  if not ovs[head] then cands[#cands + 1], ovs[head] = head, 0 end
  local loads = redis.call('GET', keys[2])
  local best, bc, bp, bd, br, bn = math.huge, 0, 0, 0, 0, 0
  for _, c in ipairs(cands) do
    local p, d, r = struct.unpack('>ddd', loads, 24 * (c - 1) + 1)
    local np = math.max(isl - ovs[c] * bs, 0)
    local cost = pls * (p + np) / bs + d + rw * r
    if cost < best then best, bc, bp, bd, br, bn = cost, c, p, d, r, np end
  end
  local blocks = math.ceil(isl / bs)
  bp, bd, br = bp + bn, bd + blocks, br + 1
  if extra then
    redis.call('HINCRBY', keys[7], 'lvs', '1')
    redis.call('ZREM', keys[3], min_member(bc))
    redis.call('ZADD', keys[8], string.format('%.17g', bp), min_member(bc))
  end
  redis.call('SETRANGE', keys[2], 24 * (bc - 1), struct.pack('>ddd', bp, bd, br))
  redis.call('ZADD', keys[3], min_score(pls, rw, bs, bp, bd, br), min_member(bc))
  redis.call('HSET', keys[4], lease, struct.pack('>I4dd', bc, bn, blocks))
  redis.call('ZADD', keys[5], string.format('%d', now + 60000), lease)
  return {bc, ovs[bc], string.format('%.17g', best)}
end
local function floor_min_route(keys, args) return min_route_with(keys, args, false) end
local function floor_mincmd_route(keys, args) return min_route_with(keys, args, true) end
local MIN_DEFAULT_LEASE = '\0\0\0\1\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0'   -- struct.pack('>I4dd', 1, 0, 0) (no library at load time)
-- min_done_with: the minimal done; with extra (kvrouter_floor_mincmd_done) also kvrouter's done's bookkeeping
-- commands: the pool record's and the stamps' HMGETs, the loads stamp's HINCRBY, the load order's ZREM, the
-- prefill order's ZADD.
local function min_done_with(keys, args, extra)
  local lease, pls, rw, bs = args[1], tonumber(args[2]), tonumber(args[3]), tonumber(args[4])
  local rec = redis.call('HGET', keys[3], lease) or MIN_DEFAULT_LEASE
  local c, np, blocks = struct.unpack('>I4dd', rec)
  local off = 24 * (c - 1)
  local p, d, r = struct.unpack('>ddd', redis.call('GETRANGE', keys[1], off, off + 23))
  p, d, r = math.max(p - np, 0), math.max(d - blocks, 0), math.max(r - 1, 0)
  if extra then
    redis.call('HMGET', keys[5], 'bin', 'layout', 'pbin')
    redis.call('HMGET', keys[6], 'rv', 'egn', 'lvs')
    redis.call('HINCRBY', keys[6], 'lvs', '1')
    redis.call('ZREM', keys[2], min_member(c))
    redis.call('ZADD', keys[7], string.format('%.17g', p), min_member(c))
  end
  redis.call('SETRANGE', keys[1], off, struct.pack('>ddd', p, d, r))
  redis.call('ZADD', keys[2], min_score(pls, rw, bs, p, d, r), min_member(c))
  redis.call('HDEL', keys[3], lease)
  redis.call('ZREM', keys[4], lease)
  return 1
end
local function floor_min_done(keys, args) return min_done_with(keys, args, false) end
local function floor_mincmd_done(keys, args) return min_done_with(keys, args, true) end
redis.register_function('kvrouter_floor_nop', floor_nop)
redis.register_function('kvrouter_floor_setup', floor_setup)
redis.register_function('kvrouter_floor_route', floor_route)
redis.register_function('kvrouter_floor_done', floor_done)
redis.register_function('kvrouter_floor_min_setup', floor_min_setup)
redis.register_function('kvrouter_floor_min_fill', floor_min_fill)
redis.register_function('kvrouter_floor_mincmd_route', floor_mincmd_route)
redis.register_function('kvrouter_floor_mincmd_done', floor_mincmd_done)
redis.register_function('kvrouter_floor_min_route', floor_min_route)
redis.register_function('kvrouter_floor_min_done', floor_min_done)
