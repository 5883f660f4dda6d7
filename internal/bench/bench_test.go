package bench

import (
	"context"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/luascripts"
	"github.com/kvrouter/kvrouter/simulation/traces"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestStartChildReadyAndStop: the harness waits for ready lines, returns their submatches, and stops
// the process with SIGTERM; a process that exits first is ErrExited with its log.
func TestStartChildReadyAndStop(t *testing.T) {
	script := `trap 'exit 0' TERM; echo "msg=listening addr=127.0.0.1:4242" >&2; while :; do sleep 0.05; done`
	c, m, err := StartChild("sh", "/bin/sh", []string{"-c", script}, nil, []*regexp.Regexp{ListeningRE}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if m[0][0][1] != "127.0.0.1:4242" {
		t.Errorf("matches %q", m)
	}
	if err := c.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	_, _, err = StartChild("sh", "/bin/sh", []string{"-c", "echo boom >&2; exit 3"}, nil, []*regexp.Regexp{ListeningRE}, time.Minute)
	if !errors.Is(err, ErrExited) || !regexp.MustCompile(`boom`).MatchString(err.Error()) {
		t.Errorf("early exit: %v; want ErrExited with the log", err)
	}
}

// TestRouteAndIngestDrivers runs the route and ingest drivers on a tiny index, on the embedded store
// and on a real Redis (with two route-script variants sharing one namespace, the second run reusing
// the loaded index).
func TestRouteAndIngestDrivers(t *testing.T) {
	ctx := context.Background()
	o := RouteOptions{Workers: 4, Blocks: 4 * 64 * 4, PromptBlocks: 16, Clients: []int{1, 2}, Routes: 20}
	rep, err := RunRoute(ctx, []RouteVariant{{"embedded", statestore.NewMemory()}}, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Decisions != 20 || rep.Runs[1].Decisions != 40 {
		t.Errorf("memory route runs %+v", rep.Runs)
	}
	ing, err := RunIngest(ctx, statestore.NewMemory(), IngestOptions{Workers: 4, Blocks: 1024, Chain: 64, Replicas: 1, Clients: 2})
	if err != nil || ing.BlocksApplied != 1024 {
		t.Errorf("ingest %+v %v; want 1024 blocks applied", ing, err)
	}

	srv := testredis.Start(t)
	lib, err := os.ReadFile("../../luascripts/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	route, err := os.ReadFile("../../luascripts/route.lua")
	if err != nil {
		t.Fatal(err)
	}
	prefix := statestore.FreshPrefix()
	var variants []RouteVariant
	for _, name := range []string{"a", "b"} {
		st, err := statestore.Open(srv.URL(), statestore.OpenOptions{Prefix: prefix, RouteScript: luascripts.Knobs() + "\n" + string(lib) + "\n" + string(route)})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		variants = append(variants, RouteVariant{name, st})
	}
	o.Clients, o.Reuse, o.Rounds = []int{1}, true, 2
	for i := 0; i < 2; i++ {
		rep, err := RunRoute(ctx, variants, o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.IndexReused != (i == 1) || len(rep.Runs) != 4 || rep.Runs[3].Variant != "b" || rep.Runs[3].Round != 2 {
			t.Errorf("redis route report %d: %+v", i, rep)
		}
		for _, r := range rep.Runs {
			if r.RedisCallsTotal != 20 || r.RedisUsPerCall <= 0 {
				t.Errorf("run %+v: want 20 EVALSHA calls with a Redis time", r)
			}
		}
	}
}

// TestIndexTimeline: a tiny trace becomes lookups and events; a pass replays them all.
func TestIndexTimeline(t *testing.T) {
	var reqs []traces.Request
	for i := 0; i < 20; i++ {
		reqs = append(reqs, traces.Request{ArrivalMs: int64(i), InputTokens: 1024, OutputTokens: 1, HashIDs: []uint64{1, uint64(2 + i%3)}})
	}
	tl, err := BuildIndexTimeline(reqs, 2, 16, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := RunIndex(context.Background(), tl, IndexOptions{Goroutines: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lookups != 20 || rep.StoredBlocks == 0 || rep.MeanOverlapRatio <= 0 {
		t.Errorf("index report %+v", rep)
	}
	if _, err := BuildIndexTimeline(reqs, 2, 7, 1024); err == nil {
		t.Error("engine block 7 accepted")
	}
}
