package statestore

import (
	"encoding/hex"
	"strings"

	"github.com/kvrouter/kvrouter/luascripts"
)

// Redis key layout. Every key of a pool carries the same hash tag, so every script touches one cluster
// slot. Since layout 6 the tag is the pool name itself, marked '=', when every byte of it is printable
// ASCII other than '{' and '}' (what pool names are in practice: "llama-3.1-70b", "org/Model-8B"); any
// other name is marked '%' and hex-encoded. Either way user input never puts a brace in the tag, so any
// pool name (even "a}{b") yields exactly one slot, and the marker keeps the two forms (and layouts 1–5's
// bare hex tags) apart, so distinct pools get distinct tags.
//
//	<prefix>{=<pool>}:<suffix>  or  <prefix>{%<hex(pool)>}:<suffix>   suffixes as listed in luascripts/lib.lua (KEYS 1..27)
//	<prefix>{<hex(pool)>}:cfg   layouts 1–5's tag (legacyPoolTag); since layout 6 only a migrated pool's
//	                            tombstone is written there (docs/REDIS.md "Layout 6: pool names in the tag")
//	<prefix>pools               SET of pool names (registry for Pools and pool-less lease calls)
//
// Why not hex for every name, as layouts 1–5 did: it doubled the name's length in every key, and key length
// is paid on every call — Redis copies each FCALL key into an object of its own (one allocation up to 44
// bytes, two above), Lua interns each as a string, and a script's redis.call arguments reuse cached objects
// only up to 64 bytes. On the route benchmark's keys (~80 bytes) a decision cost 7 % more Redis
// instructions than with ~35-byte keys (docs/PERFORMANCE.md "Eighteenth session").

// PoolTag returns the hash tag of a pool's keys, braces included.
func PoolTag(pool string) string {
	if plainTag(pool) {
		return "{=" + pool + "}"
	}
	return "{%" + hex.EncodeToString([]byte(pool)) + "}"
}

// plainTag reports whether pool can stand in its tag as it is: non-empty, printable ASCII, no brace.
func plainTag(pool string) bool {
	if pool == "" {
		return false
	}
	for i := 0; i < len(pool); i++ {
		if c := pool[i]; c < 0x21 || c > 0x7e || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// legacyPoolTag is the hash tag layouts 1–5 gave a pool: the hex encoding of its name. Only a pool's cfg
// key is ever read there (legacyCfgKey), to tell a pool written by those layouts from an unknown one, and
// `pool migrate` / `pool recreate` move or drop what is under it.
func legacyPoolTag(pool string) string { return "{" + hex.EncodeToString([]byte(pool)) + "}" }

// poolBase is what every key of a pool starts with (its suffix follows); legacyBase the same under layouts
// 1–5's tag.
func poolBase(prefix, pool string) string   { return prefix + PoolTag(pool) + ":" }
func legacyBase(prefix, pool string) string { return prefix + legacyPoolTag(pool) + ":" }

// legacyCfgKey is the cfg key layouts 1–5 wrote for pool.
func legacyCfgKey(prefix, pool string) string {
	return legacyBase(prefix, pool) + luascripts.KeySuffixes[0]
}

// PoolKeys returns every key of a pool, in the KEYS order of luascripts/lib.lua (luascripts.KeySuffixes),
// under prefix (which must not contain braces).
func PoolKeys(prefix, pool string) []string {
	base := poolBase(prefix, pool)
	out := make([]string, len(luascripts.KeySuffixes))
	for i, s := range luascripts.KeySuffixes {
		out[i] = base + s
	}
	return out
}

// scriptKeys returns the KEYS of operation s on a pool: PoolKeys, or only the keys s declares
// (luascripts.Script.Keys, spread back to their positions by the library).
func scriptKeys(s luascripts.Script, prefix, pool string) []string {
	pos := s.KeyPositions()
	if pos == nil {
		return PoolKeys(prefix, pool)
	}
	base := poolBase(prefix, pool)
	out := make([]string, len(pos))
	for i, p := range pos {
		out[i] = base + luascripts.KeySuffixes[p-1]
	}
	return out
}

// PoolsKey is the registry of pool names.
func PoolsKey(prefix string) string { return prefix + "pools" }

func validPrefix(p string) bool { return !strings.ContainsAny(p, "{}") }
