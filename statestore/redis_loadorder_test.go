package statestore

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/rueidis"
)

// encodingFixture is a pool "p" of short-id workers on the memory store and on a Redis store (prefix
// "lo:"), with the raw client to read key encodings.
type encodingFixture struct {
	t      *testing.T
	ctx    context.Context
	c      rueidis.Client
	stores []Store
	keys   []string
}

func newEncodingFixture(t *testing.T, workers ...string) *encodingFixture {
	rs, c := newInternalRedis(t, "lo:")
	f := &encodingFixture{t: t, ctx: context.Background(), c: c, stores: []Store{NewMemory(), rs}, keys: PoolKeys("lo:", "p")}
	for _, st := range f.stores {
		if err := st.PutPool(f.ctx, "p", DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
	}
	f.register(workers...)
	return f
}

func (f *encodingFixture) register(ids ...string) {
	for _, st := range f.stores {
		for _, id := range ids {
			if err := st.PutWorker(f.ctx, "p", WorkerSpec{WorkerID: id, URL: "http://" + id}, 1000); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

// encoding is OBJECT ENCODING of the pool key at position k of luascripts.KeySuffixes.
func (f *encodingFixture) encoding(k int) string {
	v, err := f.c.Do(f.ctx, f.c.B().ObjectEncoding().Key(f.keys[k]).Build()).ToString()
	if err != nil {
		f.t.Fatalf("OBJECT ENCODING %s: %v", f.keys[k], err)
	}
	return v
}

// route makes decision i on both stores (no done) and fails unless they agree.
func (f *encodingFixture) route(i int) {
	var got [2]Decision
	for k, st := range f.stores {
		d, err := st.Route(f.ctx, RouteRequest{Pool: "p", RequestID: "r" + strconv.Itoa(i), ISL: 64, Random: float64(i%7) / 7, NowMs: 1000})
		if err != nil {
			f.t.Fatal(err)
		}
		got[k] = d
	}
	if got[0].WorkerID != got[1].WorkerID || got[0].DPRank != got[1].DPRank {
		f.t.Fatalf("decision %d: memory %s/%d, redis %s/%d", i, got[0].WorkerID, got[0].DPRank, got[1].WorkerID, got[1].DPRank)
	}
}

// done ends request i's lease on both stores.
func (f *encodingFixture) done(i int) {
	for _, st := range f.stores {
		if _, err := st.Done(f.ctx, "p", "r"+strconv.Itoa(i), 1000); err != nil {
			f.t.Fatal(err)
		}
	}
}

// Positions of the keys these tests read, in luascripts.KeySuffixes order.
const (
	keyLS, keyLX, keyLZ, keyLP = 10, 11, 21, 24
)

// TestRedisLoadOrderSkiplist: the load order's sorted sets (lz, lp) of a pool of short worker ids, which
// Redis would keep as listpacks (the slow case for the ZADD of every booking and release: lib.lua
// LZ.skiplist), are skiplists once a booking moved a member, again after the roster was rewritten, and
// the decisions are the memory store's all along (encoding only). The pool is small, so it keeps its load
// orders only with the full-scan bound at 0 (lib.lua "Load orders only where a route may walk").
func TestRedisLoadOrderSkiplist(t *testing.T) {
	t.Cleanup(SetFullScanMaxRanks(0))
	f := newEncodingFixture(t, "w0", "w1", "w2", "w3")
	if e := f.encoding(keyLZ); e != "listpack" {
		t.Logf("lz after registration: %s (Redis configured for larger listpacks?)", e)
	}
	f.route(0)
	if f.encoding(keyLZ) != "skiplist" || f.encoding(keyLP) != "skiplist" {
		t.Fatalf("after a booking: lz %s, lp %s; want skiplist", f.encoding(keyLZ), f.encoding(keyLP))
	}
	for i := 1; i < 20; i++ {
		f.route(i)
		f.done(i - 1)
	}
	// A roster rewrite (a registration) rewrites members; the next booking converts again if needed.
	f.register("w4")
	f.route(20)
	if f.encoding(keyLZ) != "skiplist" || f.encoding(keyLP) != "skiplist" {
		t.Fatalf("after a registration and a booking: lz %s, lp %s; want skiplist", f.encoding(keyLZ), f.encoding(keyLP))
	}
	for i := 21; i < 40; i++ {
		f.route(i)
	}
	n, err := f.c.Do(f.ctx, f.c.B().Zcard().Key(f.keys[keyLZ]).Build()).AsInt64()
	if err != nil || n != 5 {
		t.Fatalf("lz holds %d members (%v); want the 5 ranks, no probe left", n, err)
	}
}

// TestRedisLeaseKeysEncoding: with tens of requests in flight the lease keys (ls, lx) leave listpack
// encoding (lib.lua lease_encodings: checked every 64 load moves once they hold 32 leases), no probe field
// or member is left behind, and every lease still ends (decisions equal to the memory store's).
func TestRedisLeaseKeysEncoding(t *testing.T) {
	f := newEncodingFixture(t, "w0", "w1", "w2", "w3")
	for i := 0; i < 70; i++ { // 70 bookings, none done: the 64th move finds 64 leases
		f.route(i)
	}
	if f.encoding(keyLS) != "hashtable" || f.encoding(keyLX) != "skiplist" {
		t.Fatalf("with 70 leases in flight: ls %s, lx %s; want hashtable and skiplist", f.encoding(keyLS), f.encoding(keyLX))
	}
	n, err := f.c.Do(f.ctx, f.c.B().Hlen().Key(f.keys[keyLS]).Build()).AsInt64()
	m, err2 := f.c.Do(f.ctx, f.c.B().Zcard().Key(f.keys[keyLX]).Build()).AsInt64()
	if err != nil || err2 != nil || n != 70 || m != 70 {
		t.Fatalf("ls holds %d leases, lx %d (%v, %v); want 70 each, no probe left", n, m, err, err2)
	}
	for i := 0; i < 70; i++ {
		f.done(i)
	}
	f.route(70)
}
