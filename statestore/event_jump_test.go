package statestore_test

import (
	"context"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestEventIDJump (defect 7): an event id more than 2^32 beyond the rank's last is a restart in both
// stores, identically — the rank is cleared and counted, the event applied, and later events of the
// epoch are not stale; a jump of exactly 2^32 is still a gap.
func TestEventIDJump(t *testing.T) {
	stores := bothStores(t)
	const jump = statestore.DefaultMaxEventIDJump
	stored := func(id uint64, h uint64) statestore.Event {
		return statestore.Event{EventID: id, HasEventID: true, Kind: statestore.EventStored,
			Blocks: []statestore.StoredBlock{{EngineHash: h, LocalHash: h}}}
	}
	steps := []struct {
		ev   statestore.Event
		want statestore.ApplyResult
	}{
		{stored(1, 100), statestore.ApplyResult{Applied: 1, StoredBlocks: 1}},
		{stored(1+jump, 101), statestore.ApplyResult{Applied: 1, Gaps: 1, StoredBlocks: 1}}, // exactly the jump: a gap
		{stored(2+2*jump, 102), statestore.ApplyResult{Applied: 1, Restarts: 1, StoredBlocks: 1}},
		{stored(^uint64(0), 103), statestore.ApplyResult{Applied: 1, Restarts: 1, StoredBlocks: 1}},
		{stored(^uint64(0), 104), statestore.ApplyResult{Stale: 1}},
	}
	ctx := context.Background()
	for name, st := range stores {
		setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0")
		for i, s := range steps {
			res, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0", Events: []statestore.Event{s.ev}, NowMs: int64(i)})
			if err != nil {
				t.Fatalf("%s step %d: %v", name, i, err)
			}
			if res != s.want {
				t.Errorf("%s step %d (id %d): %+v, want %+v", name, i, s.ev.EventID, res, s.want)
			}
		}
		// Only block 103 survives: the restarts cleared 100–102.
		for _, h := range []uint64{100, 101, 102, 103} {
			sc, err := st.Overlap(ctx, "default", blockhash.Sequence(nil, []uint64{h}), 10)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(sc) == 1, h == 103; got != want {
				t.Errorf("%s: block %d indexed %v, want %v", name, h, got, want)
			}
		}
	}
}
