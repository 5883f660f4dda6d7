package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// countingStore records what the router sends: each route's carried releases and each Done; failRoute
// makes Route fail with that error without calling the store.
type countingStore struct {
	statestore.Store
	mu        sync.Mutex
	carried   [][]string
	dones     []string
	doneCh    chan string // each Done's id, when set
	failRoute error
	failDone  error // Done fails with it (after recording the call)
}

func (c *countingStore) Route(ctx context.Context, req statestore.RouteRequest) (statestore.Decision, error) {
	c.mu.Lock()
	c.carried = append(c.carried, slices.Clone(req.Releases))
	fail := c.failRoute
	c.mu.Unlock()
	if fail != nil {
		return statestore.Decision{}, fail
	}
	return c.Store.Route(ctx, req)
}

func (c *countingStore) Done(ctx context.Context, pool, id string, now int64) (bool, error) {
	c.mu.Lock()
	c.dones = append(c.dones, id)
	ch, fail := c.doneCh, c.failDone
	c.mu.Unlock()
	if ch != nil {
		ch <- id
	}
	if fail != nil {
		return false, fail
	}
	return c.Store.Done(ctx, pool, id, now)
}

// manualTimer is a release queue's timer the test fires itself.
type manualTimer struct {
	f       func()
	stopped bool
}

func (m *manualTimer) Stop() bool { m.stopped = true; return true }

// releaseFixture: a router with release coalescing over the memory store (pool "p", worker w0), its
// timers kept for the test to fire.
type releaseFixture struct {
	t      *testing.T
	st     *countingStore
	rt     *Router
	timers []*manualTimer
}

func newReleaseFixture(t *testing.T) *releaseFixture {
	f := &releaseFixture{t: t, st: &countingStore{Store: statestore.NewMemory()}}
	f.rt = New(f.st, Options{ReleaseDelay: time.Hour, Now: func() int64 { return 1000 }})
	f.rt.rel.after = func(_ time.Duration, fn func()) stopper {
		m := &manualTimer{f: fn}
		f.timers = append(f.timers, m)
		return m
	}
	ctx := context.Background()
	if err := f.rt.PutPool(ctx, "p", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := f.rt.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: "w0"}, 0); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *releaseFixture) route(id string) error {
	f.t.Helper()
	_, err := f.rt.Route(context.Background(), RouteInput{Pool: "p", RequestID: id, TokenIDs: []uint32{1, 2, 3, 4, 5}})
	return err
}

// book routes each id in turn (requests booked on the pool), failing the test on any error.
func (f *releaseFixture) book(ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		if err := f.route(id); err != nil {
			f.t.Fatal(err)
		}
	}
}

// held is the pool's active requests as the store has them (not through the router, which would send its
// pending releases first).
func (f *releaseFixture) held() int64 {
	f.t.Helper()
	ws, err := f.st.Store.Workers(context.Background(), "p", 1000)
	if err != nil {
		f.t.Fatal(err)
	}
	return ws[0].Ranks[0].ActiveRequests
}

// TestReleaseRidesNextRoute: a release waits for the router's next route of its pool, which carries it
// (ended before the decision) — no Done of its own; the queue's timer is disarmed.
func TestReleaseRidesNextRoute(t *testing.T) {
	f := newReleaseFixture(t)
	f.book("r1", "r2")
	f.rt.Release("p", "r1")
	f.rt.Release("p", "r2")
	if got := f.held(); got != 2 {
		t.Fatalf("held %d before the next route, want 2 (releases pending)", got)
	}
	if len(f.timers) != 1 {
		t.Fatalf("%d timers armed, want 1 (the pool's queue)", len(f.timers))
	}
	f.book("r3")
	if got := f.held(); got != 1 {
		t.Fatalf("held %d after r3 carried r1 and r2, want 1", got)
	}
	if last := f.st.carried[len(f.st.carried)-1]; !slices.Equal(last, []string{"r1", "r2"}) {
		t.Fatalf("route r3 carried %v, want [r1 r2]", last)
	}
	if len(f.st.dones) != 0 || !f.timers[0].stopped {
		t.Fatalf("dones %v, timer stopped %v: want none sent alone and the timer stopped", f.st.dones, f.timers[0].stopped)
	}
	// Another pool's route carries nothing of p's.
	if err := f.rt.PutPool(context.Background(), "q", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	f.rt.Release("p", "r3")
	_, _ = f.rt.Route(context.Background(), RouteInput{Pool: "q", RequestID: "x", TokenIDs: []uint32{1}})
	if last := f.st.carried[len(f.st.carried)-1]; len(last) != 0 {
		t.Fatalf("pool q's route carried %v", last)
	}
}

// TestReleaseTimerSendsAlone: with no route of the pool within the delay, the timer sends each release
// with Done; the listing through the router sends pending ones first.
func TestReleaseTimerSendsAlone(t *testing.T) {
	f := newReleaseFixture(t)
	f.book("r1", "r2")
	f.rt.Release("p", "r1")
	f.timers[0].f()
	if got := f.held(); got != 1 || !slices.Equal(f.st.dones, []string{"r1"}) {
		t.Fatalf("after the timer: held %d, dones %v; want 1, [r1]", got, f.st.dones)
	}
	f.rt.Release("p", "r2")
	ws, err := f.rt.Workers(context.Background(), "p")
	if err != nil {
		t.Fatal(err)
	}
	if got := ws[0].Ranks[0].ActiveRequests; got != 0 {
		t.Fatalf("the router's own listing shows %d requests, want 0 (its pending release sent first)", got)
	}
	// The first timer, firing late after its queue was taken, sends nothing twice.
	f.timers[0].f()
	if !slices.Equal(f.st.dones, []string{"r1", "r2"}) {
		t.Fatalf("dones %v, want [r1 r2]", f.st.dones)
	}
}

// TestReleasePutBack: a route that fails before its releases could apply (store unavailable) returns them
// to the queue, and the next route carries them; one that decided after applying them (nothing eligible)
// does not.
func TestReleasePutBack(t *testing.T) {
	f := newReleaseFixture(t)
	f.book("r1")
	f.rt.Release("p", "r1")
	f.st.failRoute = fmt.Errorf("%w: test", statestore.ErrUnavailable)
	if err := f.route("r2"); !errors.Is(err, statestore.ErrUnavailable) {
		t.Fatalf("route r2: %v", err)
	}
	f.st.failRoute = nil
	f.book("r3")
	if last := f.st.carried[len(f.st.carried)-1]; !slices.Equal(last, []string{"r1"}) {
		t.Fatalf("route after the failure carried %v, want [r1]", last)
	}
	f.rt.Release("p", "r3")
	_, err := f.rt.Route(context.Background(), RouteInput{Pool: "p", RequestID: "r4", TokenIDs: []uint32{1}, ExcludedWorkers: []string{"w0"}})
	if !errors.Is(err, statestore.ErrNoEligibleWorker) {
		t.Fatalf("route excluding w0: %v", err)
	}
	if got := f.held(); got != 0 {
		t.Fatalf("held %d, want 0: the no-eligible route ended r3", got)
	}
	f.rt.FlushReleases()
	if len(f.st.dones) != 0 {
		t.Fatalf("dones %v: r3 went back to the queue after a route that had applied it", f.st.dones)
	}
}

// TestReleaseFlood: a queue reaching maxPendingReleases is sent at once, without waiting for its timer.
func TestReleaseFlood(t *testing.T) {
	f := newReleaseFixture(t)
	f.st.doneCh = make(chan string, maxPendingReleases)
	for i := range maxPendingReleases {
		f.rt.Release("p", fmt.Sprintf("x%d", i))
	}
	for range maxPendingReleases {
		<-f.st.doneCh
	}
	if len(f.timers) != 1 || !f.timers[0].stopped {
		t.Fatalf("timers %d (stopped %v), want the one queue's, stopped", len(f.timers), len(f.timers) > 0 && f.timers[0].stopped)
	}
}

// TestReleaseWithoutDelay: ReleaseDelay 0 sends each release at once.
func TestReleaseWithoutDelay(t *testing.T) {
	st := &countingStore{Store: statestore.NewMemory()}
	rt := New(st, Options{})
	ctx := context.Background()
	if err := rt.PutPool(ctx, "", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := rt.PutWorker(ctx, "", statestore.WorkerSpec{WorkerID: "w0"}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Route(ctx, RouteInput{RequestID: "r1", TokenIDs: []uint32{1}}); err != nil {
		t.Fatal(err)
	}
	rt.Release("", "r1")
	ws, err := st.Store.Workers(ctx, DefaultPool, rt.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(st.dones, []string{"r1"}) || ws[0].Ranks[0].ActiveRequests != 0 {
		t.Fatalf("dones %v, held %d; want [r1] sent at once, 0", st.dones, ws[0].Ranks[0].ActiveRequests)
	}
}

// TestReleaseStoreDown: with the store failing, a flush stops at the first failed done (one store timeout
// at most, not one per pending release) and drops the rest to their leases' TTL; nothing is retried.
func TestReleaseStoreDown(t *testing.T) {
	f := newReleaseFixture(t)
	for i := range 10 {
		f.rt.Release("p", fmt.Sprintf("x%d", i))
	}
	f.st.failDone = fmt.Errorf("%w: test", statestore.ErrUnavailable)
	if _, err := f.rt.Workers(context.Background(), "p"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.st.dones, []string{"x0"}) {
		t.Fatalf("dones tried %v, want only the first", f.st.dones)
	}
	f.rt.FlushReleases()
	if len(f.st.dones) != 1 || len(f.rt.rel.pools) != 0 {
		t.Fatalf("dones %v, queues %d: want the rest dropped, not queued again", f.st.dones, len(f.rt.rel.pools))
	}
}
