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
redis.register_function('kvrouter_floor_nop', floor_nop)
redis.register_function('kvrouter_floor_setup', floor_setup)
redis.register_function('kvrouter_floor_route', floor_route)
redis.register_function('kvrouter_floor_done', floor_done)
