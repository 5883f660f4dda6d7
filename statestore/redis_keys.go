package statestore

import (
	"encoding/hex"
	"strings"

	"github.com/kvrouter/kvrouter/luascripts"
)

// Redis key layout. Every key of a pool carries the same hash tag, so every script touches one cluster
// slot. The tag is the hex encoding of the pool name: user input can never contain '{' or '}' there, so
// any pool name (even "a}{b") yields exactly one slot, and distinct pools get distinct tags.
//
//	<prefix>{<hex(pool)>}:<suffix>      suffixes as listed in luascripts/lib.lua (KEYS 1..27)
//	<prefix>pools                       SET of pool names (registry for Pools and pool-less lease calls)

// PoolTag returns the hash tag of a pool's keys, braces included.
func PoolTag(pool string) string { return "{" + hex.EncodeToString([]byte(pool)) + "}" }

// PoolKeys returns every key of a pool, in the KEYS order of luascripts/lib.lua (luascripts.KeySuffixes),
// under prefix (which must not contain braces).
func PoolKeys(prefix, pool string) []string {
	base := prefix + PoolTag(pool) + ":"
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
	base := prefix + PoolTag(pool) + ":"
	out := make([]string, len(pos))
	for i, p := range pos {
		out[i] = base + luascripts.KeySuffixes[p-1]
	}
	return out
}

// PoolsKey is the registry of pool names.
func PoolsKey(prefix string) string { return prefix + "pools" }

func validPrefix(p string) bool { return !strings.ContainsAny(p, "{}") }
