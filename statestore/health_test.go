package statestore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/statestore"
)

// hh drives one health case against one store: pool "p" with workers w0 and w1 (equal cost: prompts of
// 0 tokens cost 0 everywhere, so random 0 picks the first eligible worker, w0 before w1).
type hh struct {
	t   *testing.T
	st  statestore.Store
	ctx context.Context
	n   int
}

// report records a forward outcome and checks the resulting state, failure count and window end.
func (h *hh) report(w string, ok bool, at int64, state string, fails, until int64) statestore.WorkerHealth {
	h.t.Helper()
	got, err := h.st.ReportForward(h.ctx, "p", w, ok, at)
	if err != nil {
		h.t.Fatalf("ReportForward(%s, %v, %d): %v", w, ok, at, err)
	}
	if got.State != state || got.ConsecutiveFailures != fails || got.UnhealthyUntilMs != until {
		h.t.Fatalf("ReportForward(%s, %v, @%d) = %+v, want state %s, failures %d, until %d", w, ok, at, got, state, fails, until)
	}
	return got
}

func (h *hh) fail(w string, at int64, state string, fails, until int64) statestore.WorkerHealth {
	h.t.Helper()
	return h.report(w, false, at, state, fails, until)
}

// route books a decision at `at` (excluding excl) and checks the chosen worker, or the no-eligible
// message when want starts with "no eligible".
func (h *hh) route(at int64, want string, excl ...string) {
	h.t.Helper()
	h.n++
	d, err := h.st.Route(h.ctx, statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", h.n), NowMs: at, ExcludedWorkers: excl})
	if strings.HasPrefix(want, "no eligible") {
		if !errors.Is(err, statestore.ErrNoEligibleWorker) || err.Error() != want {
			h.t.Fatalf("route @%d = %+v, %v; want error %q", at, d, err, want)
		}
		return
	}
	if err != nil || d.WorkerID != want {
		h.t.Fatalf("route @%d excluding %v = %+v, %v; want %s", at, excl, d, err, want)
	}
}

// reasons explains at `at` and checks each candidate's filter reason ("" eligible), in order w0, w1.
func (h *hh) reasons(at int64, want ...string) {
	h.t.Helper()
	ex, err := h.st.Explain(h.ctx, statestore.RouteRequest{Pool: "p", RequestID: "x", NowMs: at})
	if err != nil {
		h.t.Fatal(err)
	}
	for i, c := range ex.Candidates {
		if c.Filtered != want[i] {
			h.t.Fatalf("explain @%d: %s filtered %q, want %q", at, c.WorkerID, c.Filtered, want[i])
		}
	}
}

func (h *hh) workerState(at int64, w, state string) {
	h.t.Helper()
	ws, err := h.st.Workers(h.ctx, "p", at)
	if err != nil {
		h.t.Fatal(err)
	}
	for _, info := range ws {
		if info.WorkerID == w {
			if info.Health.State != state {
				h.t.Fatalf("workers @%d: %s health %+v, want state %s", at, w, info.Health, state)
			}
			return
		}
	}
	h.t.Fatalf("workers: no %s", w)
}

func (h *hh) put(w string) {
	h.t.Helper()
	if err := h.st.PutWorker(h.ctx, "p", statestore.WorkerSpec{WorkerID: w, URL: "http://" + w}, 0); err != nil {
		h.t.Fatal(err)
	}
}

// TestWorkerHealth: the health rules (statestore/health.go) on both stores, case by case, with a base
// back-off of 1000 ms and unhealthy_after 3 unless the case says otherwise.
func TestWorkerHealth(t *testing.T) {
	srv := sharedRedis(t)
	cases := []struct {
		name string
		ua   int64
		run  func(h *hh)
	}{
		{"threshold reached exactly at K, skipped while unhealthy", 3, func(h *hh) {
			h.fail("w0", 0, "healthy", 1, 0)
			h.fail("w0", 1, "healthy", 2, 0)
			h.route(1, "w0")
			h.fail("w0", 2, "unhealthy", 3, 1002)
			h.route(500, "w1")
			h.reasons(1001, "unhealthy", "")
			h.workerState(1001, "w0", "unhealthy")
		}},
		{"failures inside the window only count", 3, func(h *hh) {
			for i := int64(0); i < 3; i++ {
				h.fail("w0", i, map[bool]string{true: "unhealthy", false: "healthy"}[i == 2], i+1, map[bool]int64{true: 1002}[i == 2])
			}
			got := h.fail("w0", 600, "unhealthy", 4, 1002)
			if got.BackoffMs != 1000 {
				t.Fatalf("backoff %d, want 1000", got.BackoffMs)
			}
		}},
		{"half-open: exactly one decision probes; success heals", 1, func(h *hh) {
			h.fail("w0", 0, "unhealthy", 1, 1000)
			h.reasons(1000, "", "") // half-open: eligible (explain takes no probe)
			h.workerState(1000, "w0", "half_open")
			h.route(1000, "w0") // the probe
			h.reasons(1000, "unhealthy", "")
			h.workerState(1001, "w0", "probing")
			h.route(1001, "w1")
			h.report("w0", true, 1500, "healthy", 0, 0)
			h.route(1500, "w0")
			h.route(1501, "w0")
		}},
		{"probe failure: unhealthy again, back-off doubles up to 8x", 1, func(h *hh) {
			h.fail("w0", 0, "unhealthy", 1, 1000)
			h.route(1000, "w0")
			got := h.fail("w0", 1200, "unhealthy", 2, 3200) // back-off 2000
			if got.BackoffMs != 2000 || got.ProbeUntilMs != 0 {
				t.Fatalf("after a failed probe: %+v", got)
			}
			h.route(3199, "w1")
			h.route(3200, "w0")
			h.fail("w0", 3200, "unhealthy", 3, 7200)   // 4000
			h.fail("w0", 7200, "unhealthy", 4, 15200)  // 8000 (half-open, no probe taken: a late failure)
			h.fail("w0", 15200, "unhealthy", 5, 23200) // capped at 8000
		}},
		{"a probe whose report never comes times out", 1, func(h *hh) {
			h.fail("w0", 0, "unhealthy", 1, 1000)
			h.route(1000, "w0")
			h.route(1999, "w1")
			h.route(2000, "w0") // the probe ran out: the next decision probes again
			h.route(2001, "w1")
		}},
		{"ok resets the count mid-streak", 3, func(h *hh) {
			h.fail("w0", 0, "healthy", 1, 0)
			h.fail("w0", 1, "healthy", 2, 0)
			h.report("w0", true, 2, "healthy", 0, 0)
			h.fail("w0", 3, "healthy", 1, 0)
			h.fail("w0", 4, "healthy", 2, 0)
			h.route(5, "w0")
		}},
		{"ok inside the window heals at once", 1, func(h *hh) {
			h.fail("w0", 0, "unhealthy", 1, 1000)
			h.report("w0", true, 10, "healthy", 0, 0)
			h.route(10, "w0")
		}},
		{"excluded workers", 3, func(h *hh) {
			h.route(0, "w1", "w0")
			h.route(0, "w0", "w1", "nobody")
			h.route(0, `no eligible worker in pool "p": 2 excluded`, "w1", "w0")
		}},
		{"all unhealthy: no eligible worker naming unhealthy; excluded takes precedence", 1, func(h *hh) {
			h.fail("w0", 0, "unhealthy", 1, 1000)
			h.fail("w1", 0, "unhealthy", 1, 1000)
			h.route(1, `no eligible worker in pool "p": 2 unhealthy`)
			h.route(1, `no eligible worker in pool "p": 1 excluded, 1 unhealthy`, "w1")
		}},
		{"unhealthy_after 0: counted, never acted on", 0, func(h *hh) {
			for i := int64(1); i <= 5; i++ {
				h.fail("w0", i, "healthy", i, 0)
			}
			h.route(6, "w0")
			h.workerState(6, "w0", "healthy")
		}},
		{"re-registration keeps health, removal drops it", 1, func(h *hh) {
			h.fail("w0", 0, "unhealthy", 1, 1000)
			h.put("w0") // a heartbeat
			h.route(1, "w1")
			if err := h.st.RemoveWorker(h.ctx, "p", "w0", 2); err != nil {
				t.Fatal(err)
			}
			h.put("w0")
			h.workerState(3, "w0", "healthy")
			h.route(3, "w0")
		}},
	}
	for _, c := range cases {
		for _, name := range []string{"memory", "redis"} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				var st statestore.Store = statestore.NewMemory()
				if name == "redis" {
					st = newRedisStore(t, srv.Addr())
				}
				h := &hh{t: t, st: st, ctx: context.Background()}
				cfg := statestore.DefaultPoolConfig(4)
				cfg.UnhealthyAfter, cfg.UnhealthyBackoffMs = c.ua, 1000
				if err := st.PutPool(h.ctx, "p", cfg); err != nil {
					t.Fatal(err)
				}
				h.put("w0")
				h.put("w1")
				c.run(h)
			})
		}
	}
}

// TestReportForwardErrors: bad input and unknown names, on both stores.
func TestReportForwardErrors(t *testing.T) {
	for name, st := range bothStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			setupPool(t, st, "p", statestore.DefaultPoolConfig(4), "w0")
			for _, c := range []struct {
				pool, worker string
				want         error
			}{
				{"p", "ghost", statestore.ErrUnknownWorker},
				{"nope", "w0", statestore.ErrUnknownPool},
				{"p", "", statestore.ErrInvalid},
				{"p", strings.Repeat("x", statestore.MaxIDLength+1), statestore.ErrInvalid},
			} {
				if _, err := st.ReportForward(ctx, c.pool, c.worker, false, 0); !errors.Is(err, c.want) {
					t.Fatalf("ReportForward(%q, %q) = %v, want %v", c.pool, c.worker, err, c.want)
				}
			}
			_, err := st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "r", ExcludedWorkers: []string{"w0", ""}})
			if !errors.Is(err, statestore.ErrInvalid) || !strings.Contains(err.Error(), "excluded_workers[1]") {
				t.Fatalf("empty excluded id: %v", err)
			}
			many := make([]string, statestore.MaxWorkersPerPool+1)
			for i := range many {
				many[i] = "w"
			}
			if _, err := st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "r", ExcludedWorkers: many}); !errors.Is(err, statestore.ErrInvalid) {
				t.Fatalf("too many excluded: %v", err)
			}
			bad := statestore.DefaultPoolConfig(4)
			bad.UnhealthyBackoffMs = 0
			if err := st.PutPool(ctx, "p", bad); !errors.Is(err, statestore.ErrInvalid) || !strings.Contains(err.Error(), "unhealthy_backoff_ms") {
				t.Fatalf("backoff 0 with unhealthy_after 3: %v", err)
			}
			bad.UnhealthyAfter = -1
			if err := st.PutPool(ctx, "p", bad); !errors.Is(err, statestore.ErrInvalid) || !strings.Contains(err.Error(), "unhealthy_after") {
				t.Fatalf("unhealthy_after -1: %v", err)
			}
		})
	}
}

// TestRedisHealthSharedAcrossRouters: router A (its own Redis client) records K failures of w0; router
// B (a second, separate client on the same keys, which never saw those failures) skips w0 at once,
// explains why, lists it unhealthy, and takes the probe when the back-off ends.
func TestRedisHealthSharedAcrossRouters(t *testing.T) {
	srv := sharedRedis(t)
	a := newRedisStorePrefix(t, "shared:", srv.Addr())
	b := newRedisStorePrefix(t, "shared:", srv.Addr())
	ctx := context.Background()
	cfg := statestore.DefaultPoolConfig(4) // unhealthy_after 3, back-off 10 s
	if err := a.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w0", "w1"} {
		if err := a.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: w, URL: "http://" + w}, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := int64(1); i <= 3; i++ {
		if _, err := a.ReportForward(ctx, "p", "w0", false, 100+i); err != nil {
			t.Fatal(err)
		}
	}
	d, err := b.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "b1", NowMs: 200})
	if err != nil || d.WorkerID != "w1" {
		t.Fatalf("router B routed %+v, %v; want w1 (w0 is unhealthy)", d, err)
	}
	ex, err := b.Explain(ctx, statestore.RouteRequest{Pool: "p", RequestID: "b2", NowMs: 200})
	if err != nil || ex.Candidates[0].WorkerID != "w0" || ex.Candidates[0].Filtered != statestore.ReasonUnhealthy {
		t.Fatalf("router B explain: %+v, %v", ex, err)
	}
	ws, err := b.Workers(ctx, "p", 200)
	if err != nil || ws[0].Health.State != statestore.HealthUnhealthy || ws[0].Health.UnhealthyUntilMs != 103+10000 ||
		ws[0].Health.ConsecutiveFailures != 3 {
		t.Fatalf("router B workers: %+v, %v", ws, err)
	}
	// Back-off over: B probes w0; A (which recorded the failures) then skips it while the probe runs.
	if d, err := b.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "b3", NowMs: 10103}); err != nil || d.WorkerID != "w0" {
		t.Fatalf("router B probe: %+v, %v", d, err)
	}
	if d, err := a.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "a1", NowMs: 10104}); err != nil || d.WorkerID != "w1" {
		t.Fatalf("router A during B's probe: %+v, %v", d, err)
	}
}

// TestRedisPoolWrittenBeforeHealthKnobs: a pool config written by a version without the health knobs
// (a shorter packed cfg "bin", no ua/ubo fields) still routes, with health tracking off, until its config
// is written again.
func TestRedisPoolWrittenBeforeHealthKnobs(t *testing.T) {
	srv := sharedRedis(t)
	st := newRedisStorePrefix(t, "old:", srv.Addr())
	ctx := context.Background()
	if err := st.PutPool(ctx, "p", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := st.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: "w0"}, 0); err != nil {
		t.Fatal(err)
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfgKey := statestore.PoolKeys("old:", "p")[0]
	bin, err := c.Do(ctx, c.B().Hget().Key(cfgKey).Field("bin").Build()).ToString()
	if err != nil || len(bin) != len(statestore.Knobs())*8 {
		t.Fatalf("bin: %d bytes, %v", len(bin), err)
	}
	if err := c.Do(ctx, c.B().Hset().Key(cfgKey).FieldValue().FieldValue("bin", bin[:17*8]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Hdel().Key(cfgKey).Field("ua", "ubo").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 4; i++ {
		h, err := st.ReportForward(ctx, "p", "w0", false, i)
		if err != nil || h.State != statestore.HealthHealthy || h.ConsecutiveFailures != i {
			t.Fatalf("report %d on an old pool: %+v, %v", i, h, err)
		}
	}
	if d, err := st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "r", NowMs: 5}); err != nil || d.WorkerID != "w0" {
		t.Fatalf("route on an old pool: %+v, %v", d, err)
	}
	if cfg, err := st.GetPool(ctx, "p"); err != nil || cfg.UnhealthyAfter != 0 {
		t.Fatalf("old pool config: %+v, %v", cfg, err)
	}
}

// TestProbeTakenOnceConcurrently: when a worker turns half-open, concurrent decisions from many routers
// (on Redis: each its own client) send exactly one request to it — the probe; the others go elsewhere.
func TestProbeTakenOnceConcurrently(t *testing.T) {
	srv := sharedRedis(t)
	const routers = 24
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			stores := make([]statestore.Store, routers)
			if name == "memory" {
				m := statestore.NewMemory()
				for i := range stores {
					stores[i] = m
				}
			} else {
				for i := range stores {
					stores[i] = newRedisStorePrefix(t, "probe:", srv.Addr())
				}
			}
			cfg := statestore.DefaultPoolConfig(4)
			cfg.UnhealthyAfter, cfg.UnhealthyBackoffMs = 1, 1000
			if err := stores[0].PutPool(ctx, "p", cfg); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"w0", "w1"} {
				if err := stores[0].PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: w}, 0); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := stores[0].ReportForward(ctx, "p", "w0", false, 0); err != nil {
				t.Fatal(err)
			}
			got := make(chan string, routers)
			for i := 0; i < routers; i++ {
				go func(i int) {
					d, err := stores[i].Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("c%d", i), NowMs: 1000})
					if err != nil {
						got <- err.Error()
						return
					}
					got <- d.WorkerID
				}(i)
			}
			count := map[string]int{}
			for i := 0; i < routers; i++ {
				count[<-got]++
			}
			if count["w0"] != 1 || count["w1"] != routers-1 {
				t.Fatalf("decisions per worker %v, want exactly 1 probe to w0 and %d to w1", count, routers-1)
			}
		})
	}
}
