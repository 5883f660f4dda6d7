#!lua name=kvr_ingest_floor
-- probe.lua — the floor of ingest's Redis work per stored block, without kvrouter's logic (scripts/ingest-floor.sh).
-- Each function takes ARGV: [1] index key prefix, [2] engine-map key prefix, [3] blob of (engine hash 8 ‖
-- sequence hash 8)* (one 64-block event), and does only the writes a layout needs:
--   fl_empty     nothing: the FCALL and its arguments alone
--   fl_per_block kvrouter's layout 3 at its cheapest (a chain new to the index): per block one HSETNX of a
--                17-byte entry into its index bucket (16,384 buckets by the sequence hash, 7-byte field) and
--                one HSET into its engine-map bucket (256 by the engine hash's last byte, 7-byte field); the
--                key names built in Lua from the prefixes, as kvrouter builds them
--   fl_paged     the index written 16 blocks per command (one HSET of 16 entries into the bucket of the
--                16 blocks' first sequence hash, as a layout keyed by chain pages would), the engine map
--                per block as in fl_per_block (engine hashes are opaque: nothing groups them)
--   fl_grouped   the bound of any grouping: one HSET of the event's 64 entries into one index bucket and one
--                HSET of its 64 engine-map entries into one engine-map bucket
-- Keys are built inside the functions (a standalone server only; a probe, not kvrouter's rules).
local ISTR = {}
local function istr(n)
  local s = ISTR[n]
  if not s then s = string.format('%d', n); ISTR[n] = s end
  return s
end
local REC = '\0\0\0\1\0\0\0\1'
local function fl_empty(_, args) return #args[3] end
local function fl_per_block(_, args)
  local ke, kg, blob = args[1], args[2], args[3]
  local prev = string.rep('\0', 8)
  for off = 1, #blob, 16 do
    local seq = string.sub(blob, off + 8, off + 15)
    local a, b = string.byte(seq, 7, 8)
    redis.call('HSETNX', ke .. istr((a * 256 + b) % 16384), string.sub(seq, 1, 7), prev .. '\1' .. REC)
    redis.call('HSET', kg .. istr(string.byte(blob, off + 7)), string.sub(blob, off, off + 6), seq)
    prev = seq
  end
  return #blob / 16
end
local function fl_paged(_, args)
  local ke, kg, blob = args[1], args[2], args[3]
  local prev = string.rep('\0', 8)
  local e, n, page = {}, 0, nil
  for off = 1, #blob, 16 do
    local seq = string.sub(blob, off + 8, off + 15)
    if n == 0 then local a, b = string.byte(seq, 7, 8); page = ke .. istr((a * 256 + b) % 16384) end
    e[n + 1] = string.sub(seq, 1, 7); e[n + 2] = prev .. '\1' .. REC; n = n + 2
    if n == 32 or off + 16 > #blob then redis.call('HSET', page, unpack(e, 1, n)); n = 0 end
    redis.call('HSET', kg .. istr(string.byte(blob, off + 7)), string.sub(blob, off, off + 6), seq)
    prev = seq
  end
  return #blob / 16
end
local function fl_grouped(_, args)
  local ke, kg, blob = args[1], args[2], args[3]
  local e, g = {}, {}
  local prev = string.rep('\0', 8)
  for off = 1, #blob, 16 do
    local seq = string.sub(blob, off + 8, off + 15)
    e[#e + 1] = string.sub(seq, 1, 7); e[#e + 1] = prev .. '\1' .. REC
    g[#g + 1] = string.sub(blob, off, off + 6); g[#g + 1] = seq
    prev = seq
  end
  local a, b = string.byte(blob, 15, 16)
  redis.call('HSET', ke .. istr((a * 256 + b) % 16384), unpack(e))
  redis.call('HSET', kg .. istr(string.byte(blob, 8)), unpack(g))
  return #blob / 16
end
redis.register_function{function_name = 'fl_empty', callback = fl_empty}
redis.register_function{function_name = 'fl_per_block', callback = fl_per_block}
redis.register_function{function_name = 'fl_paged', callback = fl_paged}
redis.register_function{function_name = 'fl_grouped', callback = fl_grouped}
