package statestore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
)

// TestRedisFullScanBound checks route.lua's full-scan bound at its default (fullScanMaxRanks): a pool of
// at most that many ranks is decided by the full scan — no decision takes choose_fast — and keeps no load
// orders (no lz, no lp, cfg 'lzk' unset: lib.lua "Load orders only where a route may walk"), and a pool of
// one rank more keeps them, complete, and is decided by the load-order walk wherever it qualifies; either
// way every decision equals the memory store's, which always takes its chooseFast. Holders of the prompts'
// prefixes, loads from pinned bookings, prefill-done requests and done calls vary the states; temperature
// 0, so every decision without a session qualifies for the walk. In the "crossing" case the last worker
// registers after the bookings, so the orders are built from loads already there (LZ.build).
func TestRedisFullScanBound(t *testing.T) {
	ctx := context.Background()
	rs, c := newInternalRedis(t, "fsb:")
	bound := fullScanMaxRanks
	for _, tc := range []struct {
		name        string
		ranks, late int // late: workers registered after the bookings
	}{{"8", 8, 0}, {fmt.Sprint(bound), bound, 0}, {fmt.Sprint(bound + 1), bound + 1, 0}, {"crossing", bound + 1, 1}} {
		ranks := tc.ranks
		t.Run(tc.name, func(t *testing.T) {
			pool := "p" + tc.name
			stores := []Store{NewMemory(), rs}
			rng := rand.New(rand.NewPCG(uint64(ranks), 7))
			// Four chains of 16 blocks; each worker holds a prefix of one of them.
			chains := make([][]uint64, 4)
			for c := range chains {
				local := make([]uint64, 16)
				for i := range local {
					local[i] = rng.Uint64()
				}
				chains[c] = local
			}
			type held struct{ chain, blocks int }
			holds := make([]held, ranks)
			for w := range holds {
				holds[w] = held{rng.IntN(len(chains)), rng.IntN(17)}
			}
			register := func(st Store, from, to int) {
				for w := from; w < to; w++ {
					id := fmt.Sprintf("w%d", w)
					if err := st.PutWorker(ctx, pool, WorkerSpec{WorkerID: id, URL: "http://" + id}, 1); err != nil {
						t.Fatal(err)
					}
					h := holds[w]
					if h.blocks == 0 {
						continue
					}
					blocks := make([]StoredBlock, h.blocks)
					for i := range blocks {
						blocks[i] = StoredBlock{EngineHash: uint64(w)<<32 | uint64(i+1), LocalHash: chains[h.chain][i]}
					}
					ev := Event{Kind: EventStored, EventID: 1, HasEventID: true, Blocks: blocks}
					if _, err := st.ApplyEvents(ctx, EventBatch{Pool: pool, WorkerID: id, Events: []Event{ev}, NowMs: 1}); err != nil {
						t.Fatal(err)
					}
				}
			}
			for _, st := range stores {
				if err := st.PutPool(ctx, pool, DefaultPoolConfig(16)); err != nil {
					t.Fatal(err)
				}
				register(st, 0, ranks-tc.late)
			}
			// Loads: pinned bookings on a third of the workers, half of them past their prefill.
			for w := 0; w < ranks-tc.late; w += 3 {
				id := fmt.Sprintf("load%d", w)
				isl := int64(16 * (1 + rng.IntN(4)))
				pd := rng.IntN(2) == 0
				for _, st := range stores {
					if _, err := st.Route(ctx, RouteRequest{Pool: pool, RequestID: id, ISL: isl, PinnedWorker: fmt.Sprintf("w%d", w), NowMs: 2}); err != nil {
						t.Fatal(err)
					}
					if pd {
						if _, err := st.PrefillDone(ctx, pool, id, 2); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			for _, st := range stores {
				register(st, ranks-tc.late, ranks)
			}
			checkLoadOrdersKept(t, c, pool, ranks > bound, ranks)
			fast0 := rs.fastRoutes.Load()
			for q := 0; q < 120; q++ {
				chain := chains[rng.IntN(len(chains))]
				seq := blockhash.Sequence(nil, chain[:rng.IntN(len(chain)+1)])
				req := RouteRequest{Pool: pool, RequestID: fmt.Sprintf("q%d", q), SeqHashes: seq, ISL: int64(16*len(seq) + rng.IntN(16)),
					Random: rng.Float64(), NowMs: 3}
				var got [2]Decision
				for k, st := range stores {
					d, err := st.Route(ctx, req)
					if err != nil {
						t.Fatalf("request %d on %T: %v", q, st, err)
					}
					got[k] = d
				}
				if got[0] != got[1] {
					t.Fatalf("request %d: memory %+v, redis %+v", q, got[0], got[1])
				}
				if q%3 == 0 { // some leases end, others stay and keep loads varied
					for _, st := range stores {
						if _, err := st.Done(ctx, pool, req.RequestID, 3); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			fast := rs.fastRoutes.Load() - fast0
			switch {
			case ranks <= bound && fast != 0:
				t.Fatalf("%d of 120 decisions on %d ranks took the load-order walk; the bound is %d", fast, ranks, bound)
			case ranks > bound && fast == 0:
				t.Fatalf("no decision on %d ranks took the load-order walk (bound %d)", ranks, bound)
			}
			t.Logf("%d ranks: %d of 120 decisions through the load-order walk", ranks, fast)
			checkLoadOrdersKept(t, c, pool, ranks > bound, ranks)
		})
	}
}

// checkLoadOrdersKept asserts whether pool keeps its load orders: cfg 'lzk' and lz, lp of one member per
// rank when kept (lz's scores and order are checked by the decisions against the memory store), none of
// them when not.
func checkLoadOrdersKept(t *testing.T, c rueidis.Client, pool string, kept bool, ranks int) {
	t.Helper()
	ctx := context.Background()
	keys := PoolKeys("fsb:", pool)
	cfgKey, lzKey, lpKey := keys[0], keys[keyLZ], keys[keyLP]
	lzk, err := c.Do(ctx, c.B().Hget().Key(cfgKey).Field("lzk").Build()).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	nz, err := c.Do(ctx, c.B().Zcard().Key(lzKey).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	np, err := c.Do(ctx, c.B().Zcard().Key(lpKey).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if kept && (lzk != "1" || nz != int64(ranks) || np != int64(ranks)) {
		t.Fatalf("pool %s of %d ranks: lzk %q, lz %d, lp %d members; want kept (1, %d, %d)", pool, ranks, lzk, nz, np, ranks, ranks)
	}
	if !kept && (lzk != "" || nz != 0 || np != 0) {
		t.Fatalf("pool %s of %d ranks: lzk %q, lz %d, lp %d members; want none kept", pool, ranks, lzk, nz, np)
	}
}
