package statestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestRedisRosterSpliceAndLeaseHint drives the two shortcuts of issue 15's Redis side against the memory
// store: registration splices a new worker's ranks into the packed roster (roster_insert) instead of
// rebuilding it, and a lease's release finds its rank by the roster index recorded at booking
// (rid_locate). Worker ids are prefixes of each other ("w1", "w10", "w1a") and arrive out of order, so
// new ranks land before, between and after existing ones and shift the ranks that leases were booked
// on (their hints go stale and the release falls back to the roster search). Every decision and, after
// every release, every rank's loads must match the memory store's.
func TestRedisRosterSpliceAndLeaseHint(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	stores := []statestore.Store{statestore.NewMemory(), newRedisStore(t, srv.Addr())}
	cfg := statestore.DefaultPoolConfig(16)
	for _, s := range stores {
		if err := s.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(15, 4096))
	ids := []string{"w1", "w10", "w1a", "w2", "a", "w100", "z", "w0", "b7", "w11", "w1\x01", "m"}
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var now int64 = 1000
	var open []string
	nreq := 0
	route := func() {
		nreq++
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", nreq), ISL: int64(r.IntN(200)),
			Random: r.Float64(), NowMs: now}
		var first statestore.Decision
		for i, s := range stores {
			d, err := s.Route(ctx, req)
			if err != nil {
				t.Fatalf("%s route: %v", req.RequestID, err)
			}
			if i == 0 {
				first = d
			} else if !reflect.DeepEqual(d, first) {
				t.Fatalf("%s: redis decided %+v, memory %+v", req.RequestID, d, first)
			}
		}
		open = append(open, req.RequestID)
	}
	compareWorkers := func(when string) {
		var first []statestore.WorkerInfo
		for i, s := range stores {
			ws, err := s.Workers(ctx, "p", now)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = ws
			} else if !reflect.DeepEqual(ws, first) {
				t.Fatalf("%s: workers differ:\nredis  %+v\nmemory %+v", when, ws, first)
			}
		}
	}
	for k, id := range ids {
		spec := statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 1 + r.IntN(3),
			TotalKVBlocks: 1000, MaxNumBatchedTokens: 512}
		for _, s := range stores {
			if err := s.PutWorker(ctx, "p", spec, now); err != nil {
				t.Fatal(err)
			}
		}
		for j := 0; j < 3; j++ {
			route()
		}
		if k%3 == 2 { // release some leases booked before the last registrations moved their ranks
			for _, id := range open[:len(open)/2] {
				for _, s := range stores {
					if _, err := s.Done(ctx, "p", id, now); err != nil {
						t.Fatal(err)
					}
				}
			}
			open = open[len(open)/2:]
			compareWorkers(fmt.Sprintf("after registering %q", id))
		}
		if k == len(ids)/2 { // a removal rebuilds the roster (and drops removed workers' strings)
			for _, s := range stores {
				if err := s.RemoveWorker(ctx, "p", ids[0], now); err != nil {
					t.Fatal(err)
				}
			}
			compareWorkers("after removal")
		}
		now += 10
	}
	for _, id := range open {
		for _, s := range stores {
			if _, err := s.PrefillDone(ctx, "p", id, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	compareWorkers("after prefill_done")
	for _, id := range open {
		for _, s := range stores {
			if _, err := s.Done(ctx, "p", id, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	compareWorkers("after every release")
}

// TestRedisMemosAfterRecreate: the roster and loads memos live in the Functions library across calls,
// keyed by stamps in the pool's `sc` hash. `pool recreate` deletes that hash (its counters restart), so a
// recreated pool with the same workers must not meet the old pool's memos: its loads start at zero and
// its decisions match a fresh memory store's.
func TestRedisMemosAfterRecreate(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	rs := newRedisStore(t, srv.Addr())
	cfg := statestore.DefaultPoolConfig(16)
	setup := func(s statestore.Store) {
		if err := s.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"w1", "w2", "w3"} {
			if err := s.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 2}, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	setup(rs)
	for i := 0; i < 8; i++ { // leave loads booked: the memo holds non-zero loads
		if _, err := rs.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("old%d", i), ISL: 100, Random: 0.3, NowMs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rs.RecreatePool(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	mem := statestore.NewMemory()
	setup(mem)
	setup(rs)
	for i := 0; i < 8; i++ {
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("new%d", i), ISL: int64(16 * (i + 1)), Random: 0.7, NowMs: 3}
		a, err := mem.Route(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := rs.Route(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s after recreate: redis %+v, memory %+v", req.RequestID, b, a)
		}
	}
	wm, _ := mem.Workers(ctx, "p", 3)
	wr, err := rs.Workers(ctx, "p", 3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(wm, wr) {
		t.Fatalf("workers after recreate:\nredis  %+v\nmemory %+v", wr, wm)
	}
}
