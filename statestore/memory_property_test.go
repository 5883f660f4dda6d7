package statestore

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"pgregory.net/rapid"
)

// refWorker is the naive reference index of one worker: the set of sequence hashes it holds and the
// engine-hash links, walked from the root for every query.
type refWorker struct {
	held     map[uint64]bool
	byEngine map[uint64]uint64
}

func (r *refWorker) overlap(seq []uint64) int {
	for i, s := range seq {
		if !r.held[s] {
			return i
		}
	}
	return len(seq)
}

// TestIndexMatchesNaiveReference drives random stores, removes (including inner blocks, which break
// prefix closure) and clears over three workers and checks every query against the naive reference.
func TestIndexMatchesNaiveReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		m := NewMemory()
		if err := m.PutPool(ctx, "p", DefaultPoolConfig(4)); err != nil {
			t.Fatal(err)
		}
		workers := []string{"a", "b", "c"}
		ref := map[string]*refWorker{}
		for _, w := range workers {
			if err := m.PutWorker(ctx, "p", WorkerSpec{WorkerID: w}, 0); err != nil {
				t.Fatal(err)
			}
			ref[w] = &refWorker{held: map[uint64]bool{}, byEngine: map[uint64]uint64{}}
		}
		var chains [][]uint64 // local-hash chains stored so far (query material)
		salt := map[string]uint64{"a": 0x1111, "b": 0x2222, "c": 0x3333}
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			w := rapid.SampledFrom(workers).Draw(t, "worker")
			rw := ref[w]
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 5: // store a chain under a known parent (or the root)
				var parentLocal []uint64
				if len(chains) > 0 && rapid.Bool().Draw(t, "extend") {
					c := rapid.SampledFrom(chains).Draw(t, "chain")
					parentLocal = c[:rapid.IntRange(1, len(c)).Draw(t, "cut")]
				}
				n := rapid.IntRange(1, 70).Draw(t, "n")
				local := append([]uint64(nil), parentLocal...)
				for i := 0; i < n; i++ {
					local = append(local, uint64(rapid.IntRange(1, 3).Draw(t, "h")))
				}
				seq := blockhash.Sequence(nil, local)
				ev := Event{Kind: EventStored}
				start := len(parentLocal)
				if start > 0 {
					ev.Parent, ev.HasParent = seq[start-1]^salt[w], true
				}
				for i := start; i < len(local); i++ {
					ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[i] ^ salt[w], LocalHash: local[i]})
				}
				if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: w, Events: []Event{ev}}); err != nil {
					t.Fatal(err)
				}
				if start == 0 || rw.held[seq[start-1]] {
					for i := start; i < len(local); i++ {
						rw.held[seq[i]] = true
						rw.byEngine[seq[i]^salt[w]] = seq[i]
					}
				}
				chains = append(chains, local)
			case op < 8: // remove some blocks, known or not
				if len(chains) == 0 {
					continue
				}
				c := rapid.SampledFrom(chains).Draw(t, "rmchain")
				seq := blockhash.Sequence(nil, c)
				var hs []uint64
				for i := range seq {
					if rapid.IntRange(0, 3).Draw(t, "pick") == 0 {
						hs = append(hs, seq[i]^salt[w])
					}
				}
				if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: w, Events: []Event{{Kind: EventRemoved, Removed: hs}}}); err != nil {
					t.Fatal(err)
				}
				for _, h := range hs {
					if s, ok := rw.byEngine[h]; ok {
						delete(rw.held, s)
						delete(rw.byEngine, h)
					}
				}
			case op < 9:
				if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: w, Events: []Event{{Kind: EventCleared}}}); err != nil {
					t.Fatal(err)
				}
				rw.held, rw.byEngine = map[uint64]bool{}, map[uint64]uint64{}
			default: // query
				if len(chains) == 0 {
					continue
				}
				q := append([]uint64(nil), rapid.SampledFrom(chains).Draw(t, "q")...)
				if len(q) > 0 && rapid.Bool().Draw(t, "mutate") {
					q[rapid.IntRange(0, len(q)-1).Draw(t, "at")] = 99
				}
				seq := blockhash.Sequence(nil, q)
				got, err := m.Overlap(ctx, "p", seq, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]int{}
				for _, ww := range workers {
					if d := ref[ww].overlap(seq); d > 0 {
						want[ww] = d
					}
				}
				gotm := map[string]int{}
				for _, s := range got {
					gotm[s.WorkerID] = s.Blocks
				}
				if fmt.Sprint(gotm) != fmt.Sprint(want) {
					t.Fatalf("step %d: query %v: got %v, want %v", step, q, gotm, want)
				}
			}
		}
	})
}

// TestClearedIndexIsReclaimed checks that a cleared rank's entries — held blocks and placeholders left
// by inner removals — are all reclaimed from the pool index by later calls.
func TestClearedIndexIsReclaimed(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	if err := m.PutPool(ctx, "p", DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := m.PutWorker(ctx, "p", WorkerSpec{WorkerID: "w"}, 0); err != nil {
		t.Fatal(err)
	}
	apply := func(evs ...Event) {
		t.Helper()
		if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: "w", Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	var blocks []StoredBlock
	for i := uint64(1); i <= 3*reclaimBudget; i++ {
		blocks = append(blocks, StoredBlock{EngineHash: 1000 + i, LocalHash: i})
	}
	apply(Event{Kind: EventStored, Blocks: blocks}, Event{Kind: EventStored, Tier: TierHost, Blocks: blocks[:10]})
	apply(Event{Kind: EventRemoved, Removed: []uint64{1005, 1100, 1200}}) // inner removals: placeholders
	p, _ := m.pool("p")
	if p.events.m.Len() != len(blocks) {
		t.Fatalf("index holds %d entries, want %d", p.events.m.Len(), len(blocks))
	}
	apply(Event{Kind: EventCleared})
	for i := 0; i < 64 && (p.events.m.Len() > 0 || len(p.dead) > 0); i++ {
		apply() // each call reclaims a bounded amount
	}
	if p.events.m.Len() != 0 || len(p.events.over) != 0 || len(p.dead) != 0 {
		t.Fatalf("after clear: %d entries, %d overflow lists, %d dead indexes left", p.events.m.Len(), len(p.events.over), len(p.dead))
	}
}
