package statestore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestReclaimPending: a page of workers reports the pool's index incarnations still being deleted — a
// removed worker's rank, an engine restart's old index — and the count falls back to 0 as later route
// calls reclaim them, on both stores, each at its own pace (the memory store's budget takes a small index
// in one call).
func TestReclaimPending(t *testing.T) {
	ctx := context.Background()
	stores := bothStores(t)
	local := []uint64{1, 2, 3, 4}
	seq := blockhash.Sequence(nil, local)
	for name, st := range stores {
		pending := func(when string, want int) {
			t.Helper()
			pg, err := st.ListWorkers(ctx, "p", statestore.WorkersQuery{}, 1000)
			if err != nil {
				t.Fatal(err)
			}
			if pg.ReclaimPending != want {
				t.Fatalf("%s %s: ReclaimPending %d, want %d", name, when, pg.ReclaimPending, want)
			}
		}
		if err := st.PutPool(ctx, "p", statestore.DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"w0", "w1"} {
			if err := st.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: w, URL: "http://" + w}, 1000); err != nil {
				t.Fatal(err)
			}
			blocks := make([]statestore.StoredBlock, len(local))
			for i, h := range local {
				blocks[i] = statestore.StoredBlock{EngineHash: uint64(len(w))<<40 | h, LocalHash: h}
			}
			ev := statestore.Event{Epoch: "a", Kind: statestore.EventStored, Blocks: blocks}
			if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "p", WorkerID: w, Events: []statestore.Event{ev}, NowMs: 1000}); err != nil {
				t.Fatal(err)
			}
		}
		pending("before any removal", 0)
		if err := st.RemoveWorker(ctx, "p", "w0", 1000); err != nil {
			t.Fatal(err)
		}
		if name == "redis" { // (remove_worker reclaims nothing; the memory store may reclaim at once)
			pending("after the removal", 1)
		}
		restart := statestore.Event{Epoch: "b", Kind: statestore.EventStored, Blocks: []statestore.StoredBlock{{EngineHash: 99, LocalHash: 99}}}
		if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "p", WorkerID: "w1", Events: []statestore.Event{restart}, NowMs: 1000}); err != nil {
			t.Fatal(err)
		}
		pg, err := st.ListWorkers(ctx, "p", statestore.WorkersQuery{}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if pg.ReclaimPending > 2 || (name == "redis" && pg.ReclaimPending < 1) {
			t.Fatalf("%s after a removal and an engine restart: ReclaimPending %d, want 1-2 (the restart's own call reclaims within its budget)", name, pg.ReclaimPending)
		}
		for i := 0; i < 100 && pg.ReclaimPending > 0; i++ {
			req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", i), SeqHashes: seq, ISL: 64, NowMs: 1000}
			if _, err := st.Route(ctx, req); err != nil {
				t.Fatal(err)
			}
			if pg, err = st.ListWorkers(ctx, "p", statestore.WorkersQuery{}, 1000); err != nil {
				t.Fatal(err)
			}
		}
		pending("after the routes that reclaim", 0)
	}
}
