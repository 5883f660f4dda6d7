package statestore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/luascripts"
)

// TestKeyCache: the cache answers scriptKeys for every operation and pool, and empties itself at its bound.
func TestKeyCache(t *testing.T) {
	var c keyCache
	for _, s := range luascripts.All {
		for _, pool := range []string{"p", "pool-b", "x\x00y"} {
			if got, want := c.get(s, "kvr:", pool), scriptKeys(s, "kvr:", pool); !slices.Equal(got, want) {
				t.Fatalf("%s on %q: %q, want %q", s.Name, pool, got, want)
			}
			if got, want := c.get(s, "kvr:", pool), scriptKeys(s, "kvr:", pool); !slices.Equal(got, want) {
				t.Fatalf("%s on %q, cached: %q, want %q", s.Name, pool, got, want)
			}
		}
	}
	for i := 0; i < 2*keyCacheMax; i++ {
		c.get(luascripts.Route, "kvr:", fmt.Sprint("pool-", i))
	}
	if n := len(c.m); n > keyCacheMax {
		t.Fatalf("%d entries, bound %d", n, keyCacheMax)
	}
}

// BenchmarkDecisionCallPrep: the client's work to send one decision (route + done) before rueidis encodes
// it: both operations' KEYS and function names and route's ARGV for a 64-block prompt. "uncached" is how
// every call built them before the key cache (docs/PERFORMANCE.md "Tenth session").
func BenchmarkDecisionCallPrep(b *testing.B) {
	req := RouteRequest{Pool: "bench-w64-c64-k4-e1000000", RequestID: "req-000001", SeqHashes: make([]uint64, 64), ISL: 1024}
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			for _, s := range []luascripts.Script{luascripts.Route, luascripts.Lease} {
				_ = scriptKeys(s, "kvr:", req.Pool)
				_ = fmt.Sprintf("kvr%d_%s_%s", luascripts.Layout, luascripts.SourceDigest(), s.Name)
			}
			_ = routeArgs("route", &req)
		}
	})
	b.Run("cached", func(b *testing.B) {
		var c keyCache
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			for _, s := range []luascripts.Script{luascripts.Route, luascripts.Lease} {
				_ = c.get(s, "kvr:", req.Pool)
				_ = s.Function()
			}
			_ = routeArgs("route", &req)
		}
	})
}
