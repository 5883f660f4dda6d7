package statestore_test

import (
	"context"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestLargeEventSplit (defect 3): events larger than MaxBlocksPerCall are applied in pieces by the Redis
// store with the same outcome as the memory store's single step: counts, fencing of a replayed event,
// an unknown parent dropping the whole event, and the index.
func TestLargeEventSplit(t *testing.T) {
	const n = 3*statestore.MaxBlocksPerCall + 7
	chain := func(base uint64) []statestore.StoredBlock {
		out := make([]statestore.StoredBlock, n)
		for i := range out {
			out[i] = statestore.StoredBlock{EngineHash: base + uint64(i), LocalHash: base + uint64(i)}
		}
		return out
	}
	removed := make([]uint64, n)
	for i := range removed {
		removed[i] = 5000 + n - 1 - uint64(i) // chain(5000) from its tail
	}
	steps := []statestore.Event{
		{EventID: 1, HasEventID: true, Kind: statestore.EventStored, Blocks: chain(1000)},
		{EventID: 1, HasEventID: true, Kind: statestore.EventStored, Blocks: chain(1000)},                              // replayed: stale
		{EventID: 2, HasEventID: true, Kind: statestore.EventStored, Parent: 99, HasParent: true, Blocks: chain(9000)}, // unknown parent
		{EventID: 3, HasEventID: true, Kind: statestore.EventStored, Parent: 1000 + n - 1, HasParent: true, Blocks: chain(5000)},
		{EventID: 4, HasEventID: true, Kind: statestore.EventRemoved, Removed: removed[:n/2]},
	}
	ctx := context.Background()
	results := map[string][]statestore.ApplyResult{}
	depth := map[string][]int{}
	for name, st := range bothStores(t) {
		setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0")
		for i, ev := range steps {
			res, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0", Events: []statestore.Event{ev}, NowMs: int64(i)})
			if err != nil {
				t.Fatalf("%s step %d: %v", name, i, err)
			}
			results[name] = append(results[name], res)
		}
		for _, local := range [][]uint64{hashes(chain(1000)), append(hashes(chain(1000)), hashes(chain(5000))...)} {
			sc, err := st.Overlap(ctx, "default", blockhash.Sequence(nil, local), 100)
			if err != nil {
				t.Fatal(err)
			}
			d := 0
			if len(sc) == 1 {
				d = sc[0].Blocks
			}
			depth[name] = append(depth[name], d)
		}
	}
	for i := range steps {
		if results["memory"][i] != results["redis"][i] {
			t.Errorf("step %d: memory %+v, redis %+v", i, results["memory"][i], results["redis"][i])
		}
	}
	if results["memory"][0].Applied != 1 || results["memory"][0].StoredBlocks != n || results["memory"][1].Stale != 1 || results["memory"][2].ParentNotFound != 1 {
		t.Errorf("memory results %+v", results["memory"])
	}
	if want := []int{n, n + n - n/2}; depth["redis"][0] != want[0] || depth["redis"][1] != want[1] || depth["memory"][0] != want[0] || depth["memory"][1] != want[1] {
		t.Errorf("overlap depths: memory %v, redis %v", depth["memory"], depth["redis"])
	}
	t.Logf("results %+v, depths %v", results["redis"], depth["redis"])
}

func hashes(bs []statestore.StoredBlock) []uint64 {
	out := make([]uint64, len(bs))
	for i, b := range bs {
		out[i] = b.LocalHash
	}
	return out
}

// TestSplitEventResolvesParentOnce: the pieces of a split event (and the runs of a long batch) predict
// their parents from the sequence hashes the earlier calls of the batch stored, so only the event's own
// parent, stored by an earlier batch, is read with resolve_parents — one read, not one per piece — and
// the index is the memory store's.
func TestSplitEventResolvesParentOnce(t *testing.T) {
	srv := testredis.Start(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "10000")
	rs := newRedisStore(t, srv.Addr())
	ctx := context.Background()
	root := make([]statestore.StoredBlock, 10)
	long := make([]statestore.StoredBlock, 11*statestore.MaxBlocksPerCall+3)
	for i := range root {
		root[i] = statestore.StoredBlock{EngineHash: 100 + uint64(i), LocalHash: 100 + uint64(i)}
	}
	for i := range long {
		long[i] = statestore.StoredBlock{EngineHash: 10000 + uint64(i), LocalHash: 10000 + uint64(i)}
	}
	events := []statestore.Event{
		{EventID: 1, HasEventID: true, Kind: statestore.EventStored, Blocks: root},
		{EventID: 2, HasEventID: true, Kind: statestore.EventStored, Parent: 109, HasParent: true, Blocks: long},
	}
	mem := statestore.NewMemory()
	depth := map[string]int{}
	for name, st := range map[string]statestore.Store{"memory": mem, "redis": rs} {
		setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0")
		// The parent comes from an earlier batch, so the split event must read it once.
		if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0", Events: events[:1], NowMs: 1}); err != nil {
			t.Fatal(err)
		}
		var mark statestore.SlowlogMark
		if name == "redis" {
			var err error
			if mark, err = rs.MarkSlowlog(ctx); err != nil {
				t.Fatal(err)
			}
		}
		res, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0", Events: events[1:], NowMs: 2})
		if err != nil || res.Applied != 1 || res.StoredBlocks != len(long) {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
		if name == "redis" {
			count := func(fn string) int {
				slow, err := rs.SlowlogSince(ctx, mark, fn)
				if err != nil {
					t.Fatal(err)
				}
				return slow.Logged
			}
			resolves, applies := count("_resolve_parents"), count("_apply_events")
			if resolves != 1 || applies < len(long)/statestore.MaxBlocksPerCall {
				t.Errorf("%d resolve_parents and %d apply_events calls for a batch of %d + %d blocks; want 1 and ≥ %d",
					resolves, applies, len(root), len(long), len(long)/statestore.MaxBlocksPerCall)
			}
		}
		sc, err := st.Overlap(ctx, "default", blockhash.Sequence(nil, append(hashes(root), hashes(long)...)), 10)
		if err != nil || len(sc) != 1 {
			t.Fatalf("%s overlap: %v %v", name, sc, err)
		}
		depth[name] = sc[0].Blocks
	}
	if depth["memory"] != len(root)+len(long) || depth["redis"] != depth["memory"] {
		t.Errorf("overlap depths %v; want %d in both", depth, len(root)+len(long))
	}
}

// TestApplyWorkBudgetCalls: how a batch is cut into apply_events calls. (1) A budget stop keeps the
// batch's predictions: with a budget of one command every call applies one 16-block piece, and the
// event's parent is still read once. (2) The continuations of a dropped event are not sent: a replayed
// (stale) 199-block event costs one call — its first 64 blocks, whose continuations the script drops —
// not one per 64 blocks. Counts and the index are the memory store's throughout.
func TestApplyWorkBudgetCalls(t *testing.T) {
	srv := testredis.Start(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "10000")
	rs := newRedisStore(t, srv.Addr())
	ctx := context.Background()
	chain := func(base uint64, n int) []statestore.StoredBlock {
		out := make([]statestore.StoredBlock, n)
		for i := range out {
			out[i] = statestore.StoredBlock{EngineHash: base + uint64(i), LocalHash: base + uint64(i)}
		}
		return out
	}
	root, long := chain(100, 10), chain(10000, 3*statestore.MaxBlocksPerCall+7)
	batches := [][]statestore.Event{
		{{EventID: 1, HasEventID: true, Kind: statestore.EventStored, Blocks: root}},
		{{EventID: 2, HasEventID: true, Kind: statestore.EventStored, Parent: 109, HasParent: true, Blocks: long[:64]}},
		{{EventID: 3, HasEventID: true, Kind: statestore.EventStored, Parent: 10063, HasParent: true, Blocks: long[64:]}},
		{{EventID: 3, HasEventID: true, Kind: statestore.EventStored, Parent: 10063, HasParent: true, Blocks: long[64:]}}, // replayed
	}
	// Calls wanted per batch (resolve_parents, apply_events): the budget of batch 1 is one command.
	want := [][2]int{{0, 1}, {1, 64 / statestore.MaxBlocksPerPiece}, {1, -1}, {1, 1}}
	results := map[string][]statestore.ApplyResult{}
	for name, st := range map[string]statestore.Store{"memory": statestore.NewMemory(), "redis": rs} {
		setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0")
		for i, evs := range batches {
			var mark statestore.SlowlogMark
			if name == "redis" {
				var err error
				if mark, err = rs.MarkSlowlog(ctx); err != nil {
					t.Fatal(err)
				}
			}
			restore := func() {}
			if i == 1 {
				restore = statestore.SetApplyWorkBudget(1)
			}
			res, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0", Events: evs, NowMs: int64(i)})
			restore()
			if err != nil {
				t.Fatalf("%s batch %d: %v", name, i, err)
			}
			results[name] = append(results[name], res)
			if name != "redis" {
				continue
			}
			count := func(fn string) int {
				slow, err := rs.SlowlogSince(ctx, mark, fn)
				if err != nil {
					t.Fatal(err)
				}
				return slow.Logged
			}
			got := [2]int{count("_resolve_parents"), count("_apply_events")}
			if w := want[i]; got[0] != w[0] || (w[1] >= 0 && got[1] != w[1]) {
				t.Errorf("batch %d: %d resolve_parents and %d apply_events calls; want %v", i, got[0], got[1], w)
			}
		}
		sc, err := st.Overlap(ctx, "default", blockhash.Sequence(nil, append(hashes(root), hashes(long)...)), 10)
		if err != nil || len(sc) != 1 || sc[0].Blocks != len(root)+len(long) {
			t.Fatalf("%s overlap: %v %v", name, sc, err)
		}
	}
	for i := range batches {
		if results["memory"][i] != results["redis"][i] {
			t.Errorf("batch %d: memory %+v, redis %+v", i, results["memory"][i], results["redis"][i])
		}
	}
	if r := results["redis"][3]; r.Stale != 1 || r.Applied != 0 || r.StoredBlocks != 0 {
		t.Errorf("replayed event: %+v", r)
	}
}

// TestApplyWorkBudgetChainSizes pins what the default work budget does with 64-block events: a chain new
// to the index (~2 commands per block) goes in two calls of 32 blocks, the same chain stored by a second
// worker (its entries read and rewritten, ~3 per block) in four calls of 16 — the bound the budget is for
// (docs/REDIS.md "Calls bounded by work, not blocks"; statestore/redis.go "Why 90").
func TestApplyWorkBudgetChainSizes(t *testing.T) {
	srv := testredis.Start(t, "--slowlog-log-slower-than", "0", "--slowlog-max-len", "10000")
	rs := newRedisStore(t, srv.Addr())
	ctx := context.Background()
	setupPool(t, rs, "default", statestore.DefaultPoolConfig(4), "w0", "w1")
	const chains = 4
	for _, w := range []string{"w0", "w1"} {
		mark, err := rs.MarkSlowlog(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for c := 0; c < chains; c++ {
			blocks := make([]statestore.StoredBlock, statestore.MaxBlocksPerCall)
			for i := range blocks {
				h := uint64(1+c)<<32 + uint64(i)
				blocks[i] = statestore.StoredBlock{EngineHash: h, LocalHash: h}
			}
			ev := statestore.Event{EventID: uint64(1 + c), HasEventID: true, Kind: statestore.EventStored, Blocks: blocks}
			res, err := rs.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: w, Events: []statestore.Event{ev}, NowMs: 1})
			if err != nil || res.Applied != 1 || res.StoredBlocks != len(blocks) {
				t.Fatalf("%s chain %d: %+v, %v", w, c, res, err)
			}
		}
		slow, err := rs.SlowlogSince(ctx, mark, "_apply_events")
		if err != nil {
			t.Fatal(err)
		}
		want := 2 * chains
		if w == "w1" {
			want = 4 * chains
		}
		if slow.Logged != want {
			t.Errorf("%s: %d apply_events calls for %d chains of %d blocks; want %d", w, slow.Logged, chains, statestore.MaxBlocksPerCall, want)
		}
	}
}
