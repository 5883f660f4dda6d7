package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestRunFloor drives scripts/redis-floor's bare decision (its real library, on a real redis-server) open
// loop through RunFloor, as `kvrouter bench floor` does: every scheduled decision made, route then done,
// and the server's CPU counted. No timing is asserted (latencies are benchmark figures).
func TestRunFloor(t *testing.T) {
	lib, err := os.ReadFile("../../scripts/redis-floor/decision.lua")
	if err != nil {
		t.Fatal(err)
	}
	srv := testredis.Start(t)
	if _, err := srv.Do(10*time.Second, "FUNCTION", "LOAD", string(lib)); err != nil {
		t.Fatal(err)
	}
	tag := "kvr:{floortest}:"
	var keys, doneKeys []string
	for _, k := range strings.Fields("cfg ro wk seen lv fence sc orph nd dead ls lx ss sx e: g: s: wz hc hu sy lz lc sz lp tc") {
		keys = append(keys, tag+k)
	}
	for _, k := range strings.Fields("lv ls sx lz cfg ro wk seen fence sc hc hu lc") {
		doneKeys = append(doneKeys, tag+k)
	}
	prompt := strings.Repeat("ab", 256) // 64 blocks of 8 bytes
	member := strings.Repeat("0", 23) + "7"
	routeArgs := append([]string{prompt, "lease-1", strings.Repeat("l", 60), "1796220000000", member}, make([]string, 14)...)
	setup := append([]string{"FCALL", "kvrouter_floor_setup", "26"}, keys...)
	if _, err := srv.Do(10*time.Second, append(setup, prompt)...); err != nil {
		t.Fatal(err)
	}
	st, err := statestore.OpenRedis(srv.URL(), statestore.RedisDialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	runs, err := RunFloor(context.Background(), st, FloorOptions{Rates: []float64{200, 400}, Duration: 100 * time.Millisecond, Repeat: 1,
		RouteFn: "kvrouter_floor_route", DoneFn: "kvrouter_floor_done", RouteKeys: keys, RouteArgs: routeArgs,
		DoneKeys: doneKeys, DoneArgs: []string{"lease-1", member}})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Decisions != 20 || runs[1].Decisions != 40 {
		t.Fatalf("runs %+v; want 20 and 40 decisions", runs)
	}
	for _, r := range runs {
		if r.RedisCPUus <= 0 || r.P50us <= 0 || r.ServiceP50us <= 0 {
			t.Errorf("run at %v/s: %+v; want the server's CPU and the latencies measured", r.Rate, r)
		}
	}
	// --rates half: each client count closed loop, then open loop at half of what it made.
	half, err := RunFloor(context.Background(), st, FloorOptions{Clients: []int{1, 2}, Duration: 100 * time.Millisecond, Repeat: 1,
		RouteFn: "kvrouter_floor_route", DoneFn: "kvrouter_floor_done", RouteKeys: keys, RouteArgs: routeArgs,
		DoneKeys: doneKeys, DoneArgs: []string{"lease-1", member}})
	if err != nil {
		t.Fatal(err)
	}
	if len(half) != 4 {
		t.Fatalf("%d runs; want closed and open for 1 and 2 clients", len(half))
	}
	for i, c := range []int{1, 2} {
		closed, open := half[2*i], half[2*i+1]
		if closed.Mode != "closed" || closed.Clients != c || closed.Rate != 0 || closed.Decisions == 0 || closed.DecisionsPerS <= 0 || closed.SpinTailUs != 0 {
			t.Errorf("closed run %+v; want %d clients back to back", closed, c)
		}
		if open.Mode != "open" || open.Clients != c || open.Rate != closed.DecisionsPerS/2 || open.Decisions != int(open.Rate*0.1) {
			t.Errorf("open run %+v; want half of the closed run's %v/s for 100 ms", open, closed.DecisionsPerS)
		}
	}
	if _, err := RunFloor(context.Background(), st, FloorOptions{Rates: []float64{100}, Clients: []int{1}, RouteFn: "kvrouter_floor_route", DoneFn: "kvrouter_floor_done"}); err == nil {
		t.Fatal("rates and clients together were accepted")
	}
	if _, err := RunFloor(context.Background(), st, FloorOptions{Rates: []float64{100}, RouteFn: "kvrouter_floor_nosuch", DoneFn: "x",
		Duration: 50 * time.Millisecond, Repeat: 1}); err == nil {
		t.Fatal("a missing function did not fail the run")
	}
}
