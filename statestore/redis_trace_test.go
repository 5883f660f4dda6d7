package statestore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/simulation/traces"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestRedisMooncakeStream: a stream built from the Mooncake conversation trace — routes (with
// predict-on-route and sessions), Stored events for each chosen worker, evictions, done — identical on
// memory and Redis.
func TestRedisMooncakeStream(t *testing.T) {
	trace, err := traces.LoadMooncakeFile(traces.MooncakeConversation)
	if err != nil {
		t.Fatal(err)
	}
	srv := sharedRedis(t)
	d := &differ{t: t, a: statestore.NewMemory(), b: newRedisStore(t, srv.Addr())}
	ctx := context.Background()
	cfg := statestore.DefaultPoolConfig(512)
	cfg.PredictedTTLMs = 2000
	cfg.SessionAffinityTTLMs = 30000
	cfg.OverlapScoreCreditDecay = 0.5
	d.check("put_pool", func(s statestore.Store) (any, error) { return nil, s.PutPool(ctx, "mc", cfg) })
	const W = 16
	for i := 0; i < W; i++ {
		spec := statestore.WorkerSpec{WorkerID: fmt.Sprintf("w%02d", i), URL: "u", TotalKVBlocks: 4000, MaxNumBatchedTokens: 16384}
		d.check("put_worker", func(s statestore.Store) (any, error) { return nil, s.PutWorker(ctx, "mc", spec, 0) })
	}
	limit := 3000
	if testing.Short() {
		limit = 400
	}
	eventID := map[string]uint64{}
	stored := map[string][][]uint64{} // worker → engine-hash chains, oldest first
	var pending []string
	n := 0
	for _, r := range trace[:limit] {
		d.step = n
		local := make([]uint64, 0, len(r.HashIDs))
		for _, h := range r.HashIDs {
			local = append(local, h+1)
		}
		if full := r.InputTokens / 512; full < len(local) {
			local = local[:full]
		}
		seq := blockhash.Sequence(nil, local)
		req := statestore.RouteRequest{Pool: "mc", RequestID: fmt.Sprintf("m%d", n), SeqHashes: seq, ISL: int64(r.InputTokens),
			NowMs: r.ArrivalMs, Random: float64(n%97) / 97, SessionID: fmt.Sprintf("s%d", r.HashIDs[0]%7)}
		var chosen string
		d.check("route", func(s statestore.Store) (any, error) {
			dec, err := s.Route(ctx, req)
			chosen = dec.WorkerID
			return dec, err
		})
		pending = append(pending, req.RequestID)
		if len(pending) > 24 {
			id := pending[0]
			pending = pending[1:]
			d.check("done", func(s statestore.Store) (any, error) { return s.Done(ctx, "mc", id, r.ArrivalMs) })
		}
		if chosen != "" && len(local) > 0 {
			eventID[chosen]++
			chain := make([]uint64, len(local))
			ev := statestore.Event{Kind: statestore.EventStored, HasEventID: true, EventID: eventID[chosen]}
			for i, l := range local {
				chain[i] = seq[i] ^ uint64(len(chosen))<<60 ^ 0xabc // engine hash: opaque per worker
				ev.Blocks = append(ev.Blocks, statestore.StoredBlock{EngineHash: chain[i], LocalHash: l})
			}
			stored[chosen] = append(stored[chosen], chain)
			evs := []statestore.Event{ev}
			if len(stored[chosen]) > 40 { // evict the oldest prompt's tail (leaves shared prefixes mostly)
				old := stored[chosen][0]
				stored[chosen] = stored[chosen][1:]
				eventID[chosen]++
				evs = append(evs, statestore.Event{Kind: statestore.EventRemoved, HasEventID: true, EventID: eventID[chosen], Removed: old[len(old)/2:]})
			}
			b := statestore.EventBatch{Pool: "mc", WorkerID: chosen, NowMs: r.ArrivalMs, Events: evs}
			d.check("apply", func(s statestore.Store) (any, error) { return s.ApplyEvents(ctx, b) })
		}
		if n%50 == 0 {
			d.check("workers", func(s statestore.Store) (any, error) { return s.Workers(ctx, "mc", r.ArrivalMs) })
		}
		n++
	}
	t.Logf("%d trace requests identical", n)
}
