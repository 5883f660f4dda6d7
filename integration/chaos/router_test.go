package chaos

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// routeLoad sends POST /v1/route (then done) in a loop from `workers` goroutines until stopped,
// counting successes and failures and recording when each request started.
type routeLoad struct {
	ok, failed atomic.Int64
	stop       chan struct{}
	stopOnce   sync.Once
	results    []result // every request's start and outcome (guarded by mu)
	wg         sync.WaitGroup
	mu         sync.Mutex
	lastErr    error
}

// result is one request of a routeLoad.
type result struct {
	start time.Time
	ok    bool
}

// startRouteLoad routes request after request through router (a new prompt each time over a few
// shared prefixes), ending each lease with done, until stopRouteLoad.
func startRouteLoad(router func() string, workers int, body func(i int) map[string]any) *routeLoad {
	g := &routeLoad{stop: make(chan struct{})}
	var seq atomic.Int64
	for w := 0; w < workers; w++ {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			for {
				select {
				case <-g.stop:
					return
				default:
				}
				i := int(seq.Add(1))
				var d struct {
					RequestID string `json:"request_id"`
				}
				base := router()
				start := time.Now()
				err := httpJSON("POST", base+"/v1/route", body(i), &d)
				if err == nil {
					err = httpJSON("POST", base+"/v1/requests/"+d.RequestID+"/done", nil, nil)
				}
				if err != nil {
					g.failed.Add(1)
					g.mu.Lock()
					g.lastErr = err
					g.results = append(g.results, result{start: start})
					g.mu.Unlock()
					time.Sleep(20 * time.Millisecond) // don't spin on a dead store
					continue
				}
				g.ok.Add(1)
				g.mu.Lock()
				g.results = append(g.results, result{start: start, ok: true})
				g.mu.Unlock()
			}
		}()
	}
	return g
}

// awaitRecovery waits until `streak` requests started after fault have succeeded with no failure
// among the requests started since the first of them; it returns the outage as a client sees it:
// from fault to the start of that first request (0 when no request started after fault failed).
func (g *routeLoad) awaitRecovery(t *testing.T, what string, fault time.Time, streak int, timeout time.Duration) time.Duration {
	t.Helper()
	var outage time.Duration
	waitFor(t, timeout, what, func() string {
		g.mu.Lock()
		rs := slices.Clone(g.results)
		g.mu.Unlock()
		slices.SortFunc(rs, func(a, b result) int { return a.start.Compare(b.start) })
		from := -1 // index of the first success after the last failure started after fault
		for i, r := range rs {
			switch {
			case r.start.Before(fault):
			case !r.ok:
				from = -1
			case from < 0:
				from = i
			}
		}
		if from < 0 || len(rs)-from < streak {
			return fmt.Sprintf("not yet %d successes in a row since the fault (last error: %v)", streak, g.err())
		}
		outage = rs[from].start.Sub(fault)
		return ""
	})
	return outage
}

// halt stops the load and waits for its goroutines; it may be called more than once.
func (g *routeLoad) halt() {
	g.stopOnce.Do(func() { close(g.stop) })
	g.wg.Wait()
}

func (g *routeLoad) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastErr
}

// routeBody is a route request for prompt i (token ids of promptFor).
func routeBody(i int) map[string]any { return map[string]any{"token_ids": promptFor(i)} }

// registerWorkers registers n workers w1..wn (URLs that nobody serves: the routers only decide).
func registerWorkers(t *testing.T, router string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if err := httpJSON("PUT", fmt.Sprintf("%s/v1/workers/w%d", router, i), map[string]any{"url": fmt.Sprintf("http://w%d:8000", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// activeRequests sums active requests over every worker in the router's view.
func activeRequests(router string) (int64, error) {
	var v workersView
	if err := httpJSON("GET", router+"/v1/workers", nil, &v); err != nil {
		return 0, err
	}
	var n int64
	for _, w := range v.Workers {
		for _, r := range w.Ranks {
			n += r.ActiveRequests
		}
	}
	return n, nil
}

// waitActiveAtMost waits until the router sees at most n active requests over every worker.
func waitActiveAtMost(t *testing.T, timeout time.Duration, what, router string, n int64) {
	t.Helper()
	waitFor(t, timeout, what, func() string {
		got, err := activeRequests(router)
		if err != nil {
			return err.Error()
		}
		if got > n {
			return fmt.Sprintf("%d active requests", got)
		}
		return ""
	})
}

// TestChaosRouterKilled kills (SIGKILL) one of two routers on one Redis while it holds open leases and
// the other router routes steadily: the killed router's load must be released at lease expiry (TTL
// 5 s here), the other router must not fail a single request, and nothing of its own must leak.
func TestChaosRouterKilled(t *testing.T) {
	const leaseTTL = 5 * time.Second
	l := newLab(t, dataNet)
	l.redis("redis", []string{dataNet})
	store := "redis://redis:6379"
	ttl := fmt.Sprint(leaseTTL.Milliseconds())
	r1 := l.router("router1", store, []string{dataNet}, "--lease-ttl-ms", ttl)
	r2 := l.router("router2", store, []string{dataNet}, "--lease-ttl-ms", ttl)
	r1URL, r2URL := r1.url(dataNet, routerPort), r2.url(dataNet, routerPort)
	registerWorkers(t, r2URL, 4)

	// The killed router's in-flight requests: routed, never done.
	const open = 24
	booked := time.Now()
	for i := 0; i < open; i++ {
		if err := httpJSON("POST", r1URL+"/v1/route", routeBody(1000+i), nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := activeRequests(r2URL); err != nil || n != open {
		t.Fatalf("active requests before the kill = %d, %v; want %d", n, err, open)
	}

	load := startRouteLoad(func() string { return r2URL }, 2, routeBody)
	waitFor(t, time.Minute, "router2 routing", func() string {
		if load.ok.Load() < 20 {
			return fmt.Sprintf("%d routed", load.ok.Load())
		}
		return ""
	})
	lastBooked := booked // the leases were booked between booked and the first route of router2
	r1.kill()
	killed := time.Now()
	// Released: what is left is at most router2's own in-flight requests (2 workers).
	waitActiveAtMost(t, leaseTTL+2*time.Minute, "the killed router's leases released", r2URL, 2)
	released, sinceBooked := time.Since(killed), time.Since(lastBooked)
	okAtRelease := load.ok.Load()
	waitFor(t, time.Minute, "router2 keeps routing", func() string {
		if load.ok.Load() < okAtRelease+20 {
			return fmt.Sprintf("%d routed", load.ok.Load())
		}
		return ""
	})
	load.halt()
	n, err := activeRequests(r2URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("router killed: %d open leases on the killed router (lease TTL %v); router2 routed %d requests (route+done, 2 clients), %d failed; "+
		"killed router's load released %v after the kill (%v after its leases were booked); active requests after router2 stopped: %d",
		open, leaseTTL, load.ok.Load(), load.failed.Load(), released.Round(time.Millisecond), sinceBooked.Round(time.Millisecond), n)
	if load.failed.Load() != 0 {
		t.Errorf("router2: %d requests failed (last: %v)", load.failed.Load(), load.err())
	}
	if n != 0 {
		t.Errorf("%d active requests left after every lease ended or expired", n)
	}
}
