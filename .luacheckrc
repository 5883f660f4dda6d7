-- luacheck configuration for luascripts/*.lua (`make lint`; Debian package lua-check).
--
-- Redis runs Lua 5.1 with these libraries as globals. Every operation runs after knobs_gen.lua + lib.lua (one
-- Functions library, luascripts.Library, or an EVAL script, luascripts.Source), so the names those two files define at top level are
-- globals for the files after them; they are read from the files here, never listed by hand.
std = 'lua51'
read_globals = {'redis', 'KEYS', 'ARGV', 'cjson', 'cmsgpack', 'struct', 'bit', 'unpack'}
max_line_length = false -- as in the Go code, no fixed limit

-- toplevel returns the names a prelude file declares with a top-level `local` (functions included).
local function toplevel(path)
  local names = {}
  for line in io.lines(path) do
    local fn = line:match('^local function ([%w_]+)')
    local list = fn or line:match('^local ([%w_,%s]+)=') or line:match('^local ([%w_,%s]+)$')
    if list then
      for n in list:gmatch('[%w_]+') do names[#names + 1] = n end
    end
  end
  return names
end

-- unused_ok ignores "unused" warnings for a prelude's own top-level names: the scripts after it use them.
local function unused_ok(names)
  local out = {}
  for _, n in ipairs(names) do out[#out + 1] = '2[13][12]/^' .. n .. '$' end -- unused, or set (by bind) and read only after
  return out
end

local gen = toplevel('luascripts/knobs_gen.lua')
local lib = toplevel('luascripts/lib.lua')
local both = {}
for _, n in ipairs(gen) do both[#both + 1] = n end
for _, n in ipairs(lib) do both[#both + 1] = n end

files['luascripts/knobs_gen.lua'] = {ignore = unused_ok(gen)}
files['luascripts/lib.lua'] = {globals = gen, ignore = unused_ok(lib)}
files['luascripts/*.lua'] = {globals = both}
