package statestore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/statestore"
)

func setupPool(t *testing.T, st statestore.Store, pool string, cfg statestore.PoolConfig, workers ...string) {
	t.Helper()
	ctx := context.Background()
	if err := st.PutPool(ctx, pool, cfg); err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if err := st.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: w, URL: "http://" + w}, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedisRestartRecovers: Redis restarts without persistence (keys and loaded scripts gone); the same
// store object keeps working once its state is declared again — scripts come back through the
// EVALSHA→EVAL fallback — and nothing of the lost state survives: the lease booked before the restart
// no longer counts and cannot be ended, only the new decision is booked.
func TestRedisRestartRecovers(t *testing.T) {
	srv := sharedRedis(t)
	st := newRedisStore(t, srv.Addr())
	ctx := context.Background()
	setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0", "w1")
	if _, err := st.Route(ctx, statestore.RouteRequest{Pool: "default", RequestID: "a", ISL: 8, NowMs: 1}); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	// Calls right after the restart may see dropped connections; they must fail clearly (ErrUnavailable)
	// and later calls must succeed with the same store object (no process restart).
	deadline := time.Now().Add(30 * time.Second)
	var d statestore.Decision
	for attempt := 0; ; attempt++ {
		err := func() error {
			if err := st.PutPool(ctx, "default", statestore.DefaultPoolConfig(4)); err != nil {
				return err
			}
			for _, w := range []string{"w0", "w1"} {
				if err := st.PutWorker(ctx, "default", statestore.WorkerSpec{WorkerID: w}, 0); err != nil {
					return err
				}
			}
			var err error
			d, err = st.Route(ctx, statestore.RouteRequest{Pool: "default", RequestID: "b", ISL: 8, NowMs: 2})
			return err
		}()
		if err == nil {
			t.Logf("recovered after %d failed attempts", attempt)
			break
		}
		if !errors.Is(err, statestore.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after restart: %v", err)
		}
	}
	if d.WorkerID != "w0" { // a's lease on w0 is gone: both idle, tie → the first candidate
		t.Fatalf("route after restart chose %q", d.WorkerID)
	}
	ws, err := st.Workers(ctx, "default", 2)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"w0": 1, "w1": 0} // b only
	for _, w := range ws {
		r := w.Ranks[0]
		if r.ActiveRequests != want[w.WorkerID] || r.ActivePrefillTokens != 8*want[w.WorkerID] || r.ActiveDecodeBlocks != 2*want[w.WorkerID] {
			t.Fatalf("after restart %s holds %+v; want only request b's load (a's lease is lost)", w.WorkerID, r)
		}
	}
	if found, err := st.Done(ctx, "default", "a", 3); err != nil || found {
		t.Fatalf("done of the pre-restart request: found=%v err=%v, want a lease that no longer exists", found, err)
	}
	if found, err := st.Done(ctx, "default", "b", 3); err != nil || !found {
		t.Fatalf("done of the post-restart request: found=%v err=%v", found, err)
	}
}

// TestRedisUnreachable: a stopped Redis gives ErrUnavailable naming the store, without hanging: the call
// returns well before the caller's 30 s deadline (bound 5 s, generous for a refused connection on a
// loaded machine; a hang would take the whole 30 s).
func TestRedisUnreachable(t *testing.T) {
	srv := sharedRedis(t)
	st := newRedisStore(t, srv.Addr())
	setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0")
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := st.Route(ctx, statestore.RouteRequest{Pool: "default", RequestID: "x", ISL: 8, NowMs: 1})
	if !errors.Is(err, statestore.ErrUnavailable) || !strings.Contains(err.Error(), srv.Addr()) {
		t.Fatalf("route with Redis down: %v (want ErrUnavailable naming %s)", err, srv.Addr())
	}
	if statestore.ErrorCode(err) != "store_unavailable" {
		t.Fatalf("error code %q", statestore.ErrorCode(err))
	}
	took := time.Since(start)
	t.Logf("failed after %v: %v", took, err)
	if took >= 5*time.Second {
		t.Fatalf("route with Redis down took %v (bound 5 s against the 30 s deadline): it hangs", took)
	}
}

// TestRedisBadBatchAtomic: a malformed event in the middle of a good batch fails the whole call and
// leaves nothing of it applied (validation precedes the first write; writes are buffered).
func TestRedisBadBatchAtomic(t *testing.T) {
	srv := sharedRedis(t)
	st := newRedisStore(t, srv.Addr())
	ctx := context.Background()
	setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0")
	good := func(id uint64, local uint64) statestore.Event {
		return statestore.Event{Kind: statestore.EventStored, HasEventID: true, EventID: id,
			Blocks: []statestore.StoredBlock{{EngineHash: 100 + id, LocalHash: local}}}
	}
	if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0", Events: []statestore.Event{good(1, 1)}}); err != nil {
		t.Fatal(err)
	}
	before, _ := st.Workers(ctx, "default", 0)
	bad := statestore.Event{Kind: 9, HasEventID: true, EventID: 3}
	_, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0",
		Events: []statestore.Event{good(2, 2), bad, good(4, 4)}})
	if err == nil || statestore.ErrorCode(err) != "internal" {
		t.Fatalf("bad batch: err = %v", err)
	}
	after, _ := st.Workers(ctx, "default", 0)
	if before[0].Ranks[0] != after[0].Ranks[0] {
		t.Fatalf("half-applied: before %+v after %+v", before[0].Ranks[0], after[0].Ranks[0])
	}
	sc, _ := st.Overlap(ctx, "default", []uint64{2}, 0)
	if len(sc) != 0 {
		t.Fatalf("block of the rejected batch is indexed: %v", sc)
	}
	// The good events still apply afterwards.
	res, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0", Events: []statestore.Event{good(2, 2)}})
	if err != nil || res.Applied != 1 {
		t.Fatalf("retry: %+v %v", res, err)
	}
}

// TestRedisLeaseExpiresWithoutRouter: a router books and "dies" (its client is closed, done is never
// called); after the lease TTL the load no longer counts for anyone.
func TestRedisLeaseExpiresWithoutRouter(t *testing.T) {
	srv := sharedRedis(t)
	prefix := "lease:"
	admin := newRedisStorePrefix(t, prefix, srv.Addr())
	cfg := statestore.DefaultPoolConfig(4)
	cfg.LeaseTTLMs = 1000
	setupPool(t, admin, "default", cfg, "w0")
	ctx := context.Background()
	dying := newRedisStorePrefix(t, prefix, srv.Addr())
	if _, err := dying.Route(ctx, statestore.RouteRequest{Pool: "default", RequestID: "r", ISL: 40, NowMs: 5000}); err != nil {
		t.Fatal(err)
	}
	dying.Close()
	other := newRedisStorePrefix(t, prefix, srv.Addr())
	ws, _ := other.Workers(ctx, "default", 5999)
	if ws[0].Ranks[0].ActiveRequests != 1 || ws[0].Ranks[0].ActivePrefillTokens != 40 {
		t.Fatalf("before expiry: %+v", ws[0].Ranks[0])
	}
	ws, _ = other.Workers(ctx, "default", 6000)
	if r := ws[0].Ranks[0]; r.ActiveRequests != 0 || r.ActivePrefillTokens != 0 || r.ActiveDecodeBlocks != 0 {
		t.Fatalf("after expiry: %+v", r)
	}
	if ok, _ := other.Done(ctx, "", "r", 6001); ok {
		t.Fatal("done found an expired lease")
	}
}

// TestRedisIndexDrains: once an engine has evicted every block it stored — leaves and inner blocks, in
// every tier, in an order that leaves orphans and placeholders on the way — the pool holds no more Redis
// keys than the same pool before any event: no entry, placeholder or engine link is left behind. (The
// differential test cannot see such a leak: a leaked placeholder changes no decision, only memory.)
func TestRedisIndexDrains(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	const prefix = "drain:"
	st := newRedisStorePrefix(t, prefix, srv.Addr())
	setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0")
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := func() []string {
		t.Helper()
		var out []string
		for cursor := uint64(0); ; {
			e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e.Elements...)
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
		slices.Sort(out)
		return out
	}
	before := keys()
	removed := 0
	for i, ev := range statestore.DrainEvents() {
		ev.HasEventID, ev.EventID = true, uint64(i+1)
		res, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "default", WorkerID: "w0", Events: []statestore.Event{ev}})
		if err != nil {
			t.Fatal(err)
		}
		removed += res.RemovedBlocks
		if i == 2 && len(keys()) <= len(before)+2 {
			t.Fatalf("the stored blocks wrote only %d keys (%d before): the drain check would be vacuous", len(keys()), len(before))
		}
	}
	if removed != 80 {
		t.Fatalf("removed %d block tiers, want 80", removed)
	}
	if sc, _ := st.Overlap(ctx, "default", []uint64{1}, 0); len(sc) != 0 {
		t.Fatalf("an emptied worker still matches: %v", sc)
	}
	after := keys()
	var extra []string
	for _, k := range after {
		if !slices.Contains(before, k) && !strings.HasSuffix(k, ":fence") && !strings.HasSuffix(k, ":seen") {
			extra = append(extra, k) // the fence and last-seen keys are written by the first event
		}
	}
	if len(extra) > 0 {
		t.Fatalf("the drained pool left %d keys behind: %v", len(extra), extra)
	}
}
