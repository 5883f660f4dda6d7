package bench

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/luascripts"
	"github.com/kvrouter/kvrouter/statestore"
)

// tinyRoute is a smoke-sized route benchmark: 2 repeats, closed loop then open loop at half of it.
func tinyRoute() RouteOptions {
	return RouteOptions{Workers: []int{4}, PromptBlocks: []int{16}, Blocks: 4 * 64 * 4, Sharing: 2, Clients: []int{1, 2},
		Routes: 10, RateHalf: true, Repeat: 2, Calibrate: 5, PromptPool: 8}
}

// jsonKeys marshals v and returns the keys of the object at path (a list of field names, arrays
// descended into their first element).
func jsonKeys(t *testing.T, v any, path ...string) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, p := range path {
		m = m.(map[string]any)[p]
		if a, ok := m.([]any); ok {
			if len(a) == 0 {
				t.Fatalf("%v: empty array", path)
			}
			m = a[0]
		}
	}
	return m.(map[string]any)
}

// wantKeys fails for each key missing from m.
func wantKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s: no %q in %v", what, k, m)
		}
	}
}

// memTarget is a route benchmark target on a fresh embedded store.
func memTarget() RouteTarget {
	return RouteTarget{Name: "memory", Open: func() ([]RouteVariant, error) {
		return []RouteVariant{{"embedded", statestore.NewMemory()}}, nil
	}}
}

// TestRouteMemorySmoke: the route driver on the embedded store makes every run (closed, then open at
// half), summarises the repeats and prints the fields the docs name.
func TestRouteMemorySmoke(t *testing.T) {
	o := tinyRoute()
	o.SpinTail = DefaultSpinTail // not applied to an embedded store (its open runs say spin_tail_us 0)
	o.Settle = time.Millisecond  // reported on every open run, none on the closed ones
	var log strings.Builder
	o.Log = &log
	rep, err := RunRoute(context.Background(), []RouteTarget{memTarget()}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2*2*2 || len(rep.Summaries) != 4 || len(rep.Calibrations) != 0 {
		t.Fatalf("runs %d summaries %d calibrations %d; want 8, 4, 0", len(rep.Runs), len(rep.Summaries), len(rep.Calibrations))
	}
	for _, r := range rep.Runs {
		if r.Decisions != 10*r.Clients || r.P50us <= 0 || r.MaxUs < r.P99us || r.Mode == "open" && r.TargetRate <= 0 || r.RedisCPUus != 0 ||
			r.SpinTailUs != 0 || (r.Mode == "open") != (r.SettleMs == 1) {
			t.Errorf("run %+v", r)
		}
	}
	if s := rep.Summaries[0]; s.Runs != 2 || s.DecisionsPerS.Min > s.DecisionsPerS.Median || s.DecisionsPerS.Median > s.DecisionsPerS.Max {
		t.Errorf("summary %+v", s)
	}
	wantKeys(t, "report", jsonKeys(t, rep), "bench", "stores", "indexed_blocks", "sharing", "done_after_each_decision", "repeat", "indexes", "runs", "summaries")
	wantKeys(t, "run", jsonKeys(t, rep, "runs"), "store", "workers", "prompt_blocks", "clients", "mode", "repeat", "decisions_per_s", "p50_us", "p99_us", "max_us", "loadavg_before", "loadavg_after")
	wantKeys(t, "summary", jsonKeys(t, rep, "summaries"), "decisions_per_s", "p50_us", "p99_us", "max_us", "redis_cpu_us_per_decision", "decisions_per_redis_core_s", "client_cpu_us_per_decision", "client_spin_us_per_decision", "loadavg_1m")
	wantKeys(t, "median", jsonKeys(t, rep, "summaries", "p99_us"), "median", "min", "max")
	wantKeys(t, "index", jsonKeys(t, rep, "indexes"), "load_seconds", "client_prep_us_per_prompt", "sharing")
	if !strings.Contains(log.String(), "decisions/s") || !strings.Contains(log.String(), "open@") {
		t.Errorf("text table:\n%s", log.String())
	}
}

// TestRouteRedisSmoke: against a real Redis, two route-script variants share one index; every run has
// Redis CPU from INFO deltas, commandstats and a slowlog summary; each repeat has a calibration; a fresh
// namespace is deleted afterwards and a kept one (a fixed prefix) is reused by the next benchmark.
func TestRouteRedisSmoke(t *testing.T) {
	ctx := context.Background()
	srv := testredis.Start(t)
	src, err := luascripts.Source("route") // a route-script variant: the embedded source itself
	if err != nil {
		t.Fatal(err)
	}
	open := func(prefix string, script string) func() ([]RouteVariant, error) {
		return func() ([]RouteVariant, error) {
			var vs []RouteVariant
			for _, name := range []string{"a", "b"} {
				st, err := statestore.Open(srv.URL(), statestore.OpenOptions{Prefix: prefix, RouteScript: script})
				if err != nil {
					return nil, err
				}
				vs = append(vs, RouteVariant{name, st})
			}
			return vs, nil
		}
	}
	o := tinyRoute()
	o.Clients = []int{2}
	o.SpinTail = DefaultSpinTail // applied to a server store's open runs
	rep, err := RunRoute(ctx, []RouteTarget{{Name: "redis", Open: open(statestore.FreshPrefix(), "")}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2*2*2 || len(rep.Calibrations) != 2*2 {
		// 2 repeats × 2 variants × 1 client count
		t.Fatalf("runs %d calibrations %d; want 8 and 4", len(rep.Runs), len(rep.Calibrations))
	}
	for _, r := range rep.Runs {
		if r.RedisCPUus <= 0 || r.DecisionsPerCoreS <= 0 || r.Calls < 2 || r.Slowlog == nil || r.Variant == "" || r.ClientCPUus <= 0 {
			t.Errorf("run %+v: want Redis CPU, ≥ 2 calls per decision (route + done), a slowlog summary, client CPU", r)
		}
		if want := map[bool]float64{true: float64(DefaultSpinTail.Microseconds())}[r.Mode == "open"]; r.SpinTailUs != want {
			t.Errorf("%s run: spin_tail_us %v, want %v", r.Mode, r.SpinTailUs, want)
		}
	}
	for _, c := range rep.Calibrations {
		if c.RouteCPUus <= 0 || c.DoneCPUus <= 0 || c.Calls != 5 {
			t.Errorf("calibration %+v", c)
		}
	}
	wantKeys(t, "run", jsonKeys(t, rep, "runs"), "redis_cpu_us_per_decision", "redis_cpu_us_per_decision_excl_done", "decisions_per_redis_core_s", "command_us_per_decision", "slowlog")
	wantKeys(t, "slowlog", jsonKeys(t, rep, "runs", "slowlog"), "threshold_us", "logged", "max_us")
	if n, err := srv.Do(5*time.Second, "DBSIZE"); err != nil || n != "0" {
		t.Errorf("DBSIZE after a fresh-namespace benchmark = %q, %v; want 0 (namespace dropped)", n, err)
	}

	kept := RouteTarget{Name: "redis", Keep: true, Open: open("kvr:bench-kept:", src)}
	o.Repeat, o.RateHalf, o.Calibrate = 1, false, -1
	for i := 0; i < 2; i++ {
		rep, err := RunRoute(ctx, []RouteTarget{kept}, o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Indexes[0].Reused != (i == 1) || len(rep.Runs) != 2 || len(rep.Calibrations) != 0 {
			t.Errorf("kept namespace, benchmark %d: %+v", i, rep.Indexes)
		}
	}
}
