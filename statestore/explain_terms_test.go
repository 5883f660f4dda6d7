package statestore_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// explainFleet sets up one pool on st: block size 4, prefill scale 2, request weight 3; w0 holds the
// prompt's first two blocks; w1 carries one routed request; w2 is idle and cold.
func explainFleet(t *testing.T, st statestore.Store, temperature float64) []uint64 {
	t.Helper()
	ctx := context.Background()
	cfg := statestore.DefaultPoolConfig(4)
	cfg.PrefillLoadScale, cfg.DecodeActiveRequestWeight, cfg.Temperature = 2, 3, temperature
	if err := st.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w0", "w1", "w2"} {
		if err := st.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: w, URL: "http://" + w}, 1); err != nil {
			t.Fatal(err)
		}
	}
	local := []uint64{11, 12, 13, 14}
	seq := blockhash.Sequence(nil, local)
	ev := statestore.Event{Kind: statestore.EventStored, Blocks: []statestore.StoredBlock{
		{EngineHash: 1, LocalHash: local[0]}, {EngineHash: 2, LocalHash: local[1]}}}
	if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "p", WorkerID: "w0", Events: []statestore.Event{ev}, NowMs: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "busy", ISL: 8, PinnedWorker: "w1", NowMs: 1}); err != nil {
		t.Fatal(err)
	}
	return seq
}

// TestExplainCostTerms: on both stores, every candidate's terms add up to its cost exactly and match
// SPEC §6.2 by hand, the tie-break names the rule and the draw, and the two explanations are identical.
func TestExplainCostTerms(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	for _, temp := range []float64{0, 0.5} {
		var got []statestore.Explanation
		for _, st := range []statestore.Store{statestore.NewMemory(), newRedisStore(t, srv.Addr())} {
			seq := explainFleet(t, st, temp)
			ex, err := st.Explain(ctx, statestore.RouteRequest{Pool: "p", RequestID: "r", SeqHashes: seq, ISL: 16, Random: 0.6, NowMs: 2})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ex)
			for _, c := range ex.Candidates {
				tm := c.Terms
				if tm == nil || tm.PrefillTerm+float64(tm.DecodeBlocks)+tm.RequestTerm != c.Cost {
					t.Errorf("%s T=%v %s: terms %+v do not add up to cost %v", st.Name(), temp, c.WorkerID, tm, c.Cost)
				}
			}
			// By hand: isl 16 → 4 prefill blocks, 4 required. w0: credit 2 → (4−2)·2 + 4 = 8.
			// w1: 8 prefill tokens booked (2 blocks), 2 decode blocks, 1 request → (2+4)·2 + (2+4) + 3 = 21.
			// w2: 4·2 + 4 = 12.
			want := map[string]statestore.CostTerms{
				"w0": {PrefillBlocks: 4, PrefillBlocksAfterCredit: 2, PrefillTerm: 4, DecodeBlocks: 4},
				"w1": {PrefillBlocks: 6, PrefillBlocksAfterCredit: 6, PrefillTerm: 12, DecodeBlocks: 6, RequestTerm: 3},
				"w2": {PrefillBlocks: 4, PrefillBlocksAfterCredit: 4, PrefillTerm: 8, DecodeBlocks: 4},
			}
			for _, c := range ex.Candidates {
				if w := want[c.WorkerID]; c.Terms == nil || *c.Terms != w {
					t.Errorf("%s T=%v %s: terms %+v, want %+v", st.Name(), temp, c.WorkerID, c.Terms, w)
				}
			}
			tb := ex.TieBreak
			switch {
			case tb == nil:
				t.Fatalf("%s T=%v: no tie_break", st.Name(), temp)
			case temp == 0 && (tb.Rule != "min" || tb.Tied != 1 || tb.Index != 0 || tb.Eligible != 3 || tb.Random != 0.6):
				t.Errorf("%s: tie_break %+v, want min over 1 tied of 3 eligible", st.Name(), tb)
			case temp > 0:
				sum, cum, first := 0.0, 0.0, -1
				for i, p := range tb.Probabilities {
					sum += p
					if cum += p; cum > tb.Random && first < 0 {
						first = i
					}
				}
				if tb.Rule != "softmax" || len(tb.Probabilities) != 3 || math.Abs(sum-1) > 1e-12 || first != tb.Index ||
					ex.Candidates[tb.Index].WorkerID != ex.Decision.WorkerID {
					t.Errorf("%s: tie_break %+v (decision %s); want softmax whose cumulative probabilities pick the decision", st.Name(), tb, ex.Decision.WorkerID)
				}
			}
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Errorf("T=%v: memory and Redis explanations differ:\n%s\n%s", temp, fmt.Sprint(got[0]), fmt.Sprint(got[1]))
		}
	}
}

// TestExplainTieBreakTied: three candidates at the same minimum cost; random 0.5 picks the middle one,
// index floor(0.5·3) = 1.
func TestExplainTieBreakTied(t *testing.T) {
	ctx := context.Background()
	st := statestore.NewMemory()
	if err := st.PutPool(ctx, "p", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"a", "b", "c"} {
		if err := st.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: w}, 1); err != nil {
			t.Fatal(err)
		}
	}
	ex, err := st.Explain(ctx, statestore.RouteRequest{Pool: "p", RequestID: "r", ISL: 8, Random: 0.5, NowMs: 2})
	if err != nil {
		t.Fatal(err)
	}
	want := statestore.TieBreak{Rule: "min", Random: 0.5, Eligible: 3, Tied: 3, Index: 1}
	if ex.TieBreak == nil || !reflect.DeepEqual(*ex.TieBreak, want) || ex.Decision.WorkerID != "b" {
		t.Errorf("tie_break %+v decision %+v; want %+v choosing b", ex.TieBreak, ex.Decision, want)
	}
}
