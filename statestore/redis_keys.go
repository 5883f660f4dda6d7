package statestore

import (
	"encoding/hex"
	"strings"
)

// Redis key layout. Every key of a pool carries the same hash tag, so every script touches one cluster
// slot. The tag is the hex encoding of the pool name: user input can never contain '{' or '}' there, so
// any pool name (even "a}{b") yields exactly one slot, and distinct pools get distinct tags.
//
//	<prefix>{<hex(pool)>}:<suffix>      suffixes as listed in luascripts/lib.lua (KEYS 1..27)
//	<prefix>pools                       SET of pool names (registry for Pools and pool-less lease calls)

// poolKeySuffixes is the KEYS order every script expects (luascripts/lib.lua).
var poolKeySuffixes = []string{"cfg", "ro", "wk", "seen", "lv", "fence", "sc", "orph", "nd", "dead", "ls", "lx", "ss", "sx", "e:", "g:", "s:", "wz", "hc", "hu", "sy", "lz", "lc", "sz", "lp", "tc", "lzn"}

// PoolTag returns the hash tag of a pool's keys, braces included.
func PoolTag(pool string) string { return "{" + hex.EncodeToString([]byte(pool)) + "}" }

// PoolKeys returns the KEYS of every pool script, in order, under prefix (which must not contain braces).
func PoolKeys(prefix, pool string) []string {
	base := prefix + PoolTag(pool) + ":"
	out := make([]string, len(poolKeySuffixes))
	for i, s := range poolKeySuffixes {
		out[i] = base + s
	}
	return out
}

// PoolsKey is the registry of pool names.
func PoolsKey(prefix string) string { return prefix + "pools" }

func validPrefix(p string) bool { return !strings.ContainsAny(p, "{}") }
