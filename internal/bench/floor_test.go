package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
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
		if r.RedisCPUus <= 0 || r.P50us <= 0 || r.ServiceP50us <= 0 || r.ClientCPUus <= 0 || r.ClientBusy <= 0 {
			t.Errorf("run at %v/s: %+v; want the server's CPU, the client's and the latencies measured", r.Rate, r)
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
	// NoDone: the done function is never called, so one that does not exist cannot fail the run.
	if _, err := RunFloor(context.Background(), st, FloorOptions{Rates: []float64{200}, RouteFn: "kvrouter_floor_nop",
		DoneFn: "kvrouter_floor_nosuch", Duration: 50 * time.Millisecond, Repeat: 1}); err == nil {
		t.Fatal("a missing done function did not fail the run")
	}
	nd, err := RunFloor(context.Background(), st, FloorOptions{Rates: []float64{200}, RouteFn: "kvrouter_floor_nop",
		DoneFn: "kvrouter_floor_nosuch", NoDone: true, Duration: 50 * time.Millisecond, Repeat: 1})
	if err != nil || len(nd) != 1 || nd[0].Decisions != 10 {
		t.Fatalf("NoDone: %+v, %v; want one run of 10 route calls and no done call", nd, err)
	}
}

// TestFloorMinDecision checks that scripts/redis-floor's minimal deciding decision decides (it is a floor
// under designs that choose, so it must really choose): the four holders of the prompt's first 40 blocks
// win while they are the cheapest, then the least-loaded candidate of the load order; every booking is
// in the loads, the load order and the leases, and the dones take all of it back. And RunFloor drives it.
func TestFloorMinDecision(t *testing.T) {
	lib, err := os.ReadFile("../../scripts/redis-floor/decision.lua")
	if err != nil {
		t.Fatal(err)
	}
	srv := testredis.Start(t)
	do := func(args ...string) string {
		t.Helper()
		r, err := srv.Do(10*time.Second, args...)
		if err != nil {
			t.Fatalf("%v: %v", args[:2], err)
		}
		return r
	}
	do("FUNCTION", "LOAD", string(lib))
	tag := "kvr:{floormin}:"
	ke, klv, klz, kls, klx := tag+"e:", tag+"lv", tag+"lz", tag+"ls", tag+"lx"
	var prompt strings.Builder
	for i := range 64 { // 64 blocks of 8 bytes, all distinct
		fmt.Fprintf(&prompt, "blk%05d", i)
	}
	do("FCALL", "kvrouter_floor_min_setup", "3", ke, klv, klz, prompt.String())
	st, err := statestore.OpenRedis(srv.URL(), statestore.RedisDialOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	call := func(fn string, keys, args []string) {
		t.Helper()
		if err := st.CallFunction(ctx, fn, keys, args); err != nil {
			t.Fatal(err)
		}
	}
	route := func(lease string) {
		call("kvrouter_floor_min_route", []string{ke, klv, klz, kls, klx}, []string{prompt.String(), lease, "1796220000000", "1024", "16", "1", "1"})
	}
	done := func(lease string) {
		call("kvrouter_floor_min_done", []string{klv, klz, kls, klx}, []string{lease, "1", "1", "16"})
	}
	member := func(c int) string { return string([]byte{0, 0, 0, byte(c)}) }
	// loadsIn reads candidate c's loads (prefill tokens, decode blocks, requests) from the loads string key.
	loadsIn := func(key string, c int) [3]float64 {
		t.Helper()
		b := do("GETRANGE", key, strconv.Itoa(24*(c-1)), strconv.Itoa(24*c-1))
		var l [3]float64
		for i := range l {
			l[i] = math.Float64frombits(binary.BigEndian.Uint64([]byte(b[8*i : 8*i+8])))
		}
		return l
	}
	loads := func(c int) [3]float64 { return loadsIn(klv, c) }
	for i := 1; i <= 5; i++ {
		route(fmt.Sprintf("L%d", i))
	}
	// 1,024 tokens in blocks of 16: a holder prefills 1,024 - 40·16 = 384 tokens (cost 24), another
	// candidate 1,024 (cost 64); a booked holder then costs (384+384)/16 + 64 + 1 = 113, so the fifth
	// decision goes to the load order's head, candidate 5.
	for c := 1; c <= 5; c++ {
		want := [3]float64{384, 64, 1}
		if c == 5 {
			want[0] = 1024
		}
		if got := loads(c); got != want {
			t.Errorf("candidate %d loads %v; want %v", c, got, want)
		}
	}
	if got := loads(6); got != [3]float64{} {
		t.Errorf("candidate 6 loads %v; want none", got)
	}
	if s := do("ZSCORE", klz, member(1)); s != "89" {
		t.Errorf("candidate 1's load order score %s; want 89", s)
	}
	if s := do("ZSCORE", klz, member(5)); s != "129" {
		t.Errorf("candidate 5's load order score %s; want 129", s)
	}
	if n := do("HLEN", kls); n != "5" {
		t.Errorf("%s leases; want 5", n)
	}
	for i := 1; i <= 5; i++ {
		done(fmt.Sprintf("L%d", i))
	}
	for c := 1; c <= 5; c++ {
		if got := loads(c); got != [3]float64{} {
			t.Errorf("after the dones candidate %d loads %v; want none", c, got)
		}
		if s := do("ZSCORE", klz, member(c)); s != "0" {
			t.Errorf("after the dones candidate %d's score %s; want 0", c, s)
		}
	}
	if n, m := do("HLEN", kls), do("ZCARD", klx); n != "0" || m != "0" {
		t.Errorf("after the dones %s leases, %s expiries; want none", n, m)
	}

	// A pool of many prompts (FillMinFloor): prompt k is held by candidates 4k+1..4k+4 (mod 64).
	big := "kvr:{floorbig}:"
	bke, bklv, bklz, bkls, bklx := big+"e:", big+"lv", big+"lz", big+"ls", big+"lx"
	call("kvrouter_floor_min_setup", []string{bke, bklv, bklz}, nil)
	prompts, err := FillMinFloor(ctx, st, bke, 100, 7)
	if err != nil {
		t.Fatal(err)
	}
	if len(prompts) != 100 || len(prompts[0]) != MinFloorPromptBytes || prompts[0] == prompts[1] {
		t.Fatalf("%d prompts, the first %d bytes; want 100 distinct of %d", len(prompts), len(prompts[0]), MinFloorPromptBytes)
	}
	// bench floor --no-fill routes MinFloorPrompts of the same seed: they must be the prompts the fill indexed.
	if again, err := MinFloorPrompts(100, 7); err != nil || !slices.Equal(again, prompts) {
		t.Errorf("MinFloorPrompts(100, 7) differs from the prompts FillMinFloor indexed (err %v)", err)
	}
	if _, err := MinFloorPrompts(0, 7); err == nil {
		t.Error("MinFloorPrompts(0, …) did not refuse")
	}
	call("kvrouter_floor_min_route", []string{bke, bklv, bklz, bkls, bklx}, []string{prompts[70], "B", "1796220000000", "1024", "16", "1", "1"})
	if loadsIn(bklv, 4*70%64+1)[0] != 384 {
		t.Errorf("prompt 70 did not book its first holder, candidate %d, with 384 tokens to prefill", 4*70%64+1)
	}
	// The same with kvrouter's bookkeeping commands added (kvrouter_floor_mincmd_*): it decides alike.
	extra := []string{big + "cfg", big + "sc", big + "lp", big + "dead", big + "sx", big + "sy", big + "orph", big + "nd", big + "hu"}
	call("kvrouter_floor_mincmd_route", append([]string{bke, bklv, bklz, bkls, bklx}, extra...), []string{prompts[71], "C", "1796220000000", "1024", "16", "1", "1"})
	if loadsIn(bklv, 4*71%64+1)[0] != 384 {
		t.Errorf("mincmd: prompt 71 did not book its first holder, candidate %d", 4*71%64+1)
	}
	call("kvrouter_floor_mincmd_done", []string{bklv, bklz, bkls, bklx, big + "cfg", big + "sc", big + "lp"}, []string{"C", "1", "1", "16"})
	if loadsIn(bklv, 4*71%64+1) != [3]float64{} {
		t.Errorf("mincmd: done did not release candidate %d", 4*71%64+1)
	}
	if n := do("HGET", big+"sc", "lvs"); n != "2" {
		t.Errorf("mincmd: loads stamp %s; want 2 (route and done each take one)", n)
	}
	runs, err := RunFloor(ctx, st, FloorOptions{Clients: []int{1}, Duration: 100 * time.Millisecond, Repeat: 1, Prompts: prompts,
		RouteFn: "kvrouter_floor_min_route", DoneFn: "kvrouter_floor_min_done",
		RouteKeys: []string{bke, bklv, bklz, bkls, bklx}, RouteArgs: []string{"", "B", "1796220000000", "1024", "16", "1", "1"},
		DoneKeys: []string{bklv, bklz, bkls, bklx}, DoneArgs: []string{"B", "1", "1", "16"}})
	if err != nil || len(runs) != 2 || runs[0].Decisions == 0 {
		t.Fatalf("runs over the prompts %+v, %v; want a closed and an open run that decided", runs, err)
	}
	runs, err = RunFloor(ctx, st, FloorOptions{Clients: []int{2}, Duration: 100 * time.Millisecond, Repeat: 1,
		RouteFn: "kvrouter_floor_min_route", DoneFn: "kvrouter_floor_min_done",
		RouteKeys: []string{ke, klv, klz, kls, klx}, RouteArgs: []string{prompt.String(), "L", "1796220000000", "1024", "16", "1", "1"},
		DoneKeys: []string{klv, klz, kls, klx}, DoneArgs: []string{"L", "1", "1", "16"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].Decisions == 0 || runs[1].Decisions == 0 || runs[0].RedisCPUus <= 0 {
		t.Fatalf("runs %+v; want a closed and an open run that decided", runs)
	}
}
