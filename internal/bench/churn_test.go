package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestChurn: on the memory store and a real Redis, every cycle's calls are timed under their labels in
// call order (what roster-percall.sh matches callgrind's dumps to), Redis runs report the measured calls'
// SLOWLOG and Redis CPU, and a fresh namespace is deleted afterwards.
func TestChurn(t *testing.T) {
	ctx := context.Background()
	srv := testredis.Start(t)
	for _, url := range []string{"memory", srv.URL()} {
		st, err := statestore.Open(url, statestore.OpenOptions{Fresh: true})
		if err != nil {
			t.Fatal(err)
		}
		var ops, log bytes.Buffer
		rep, err := RunChurn(ctx, st, ChurnOptions{Workers: 12, Blocks: 3000, Sharing: 2, Cycles: 3, Between: 2, Warm: 4, Ops: &ops, Log: &log})
		st.Close()
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		lines := strings.Fields(ops.String())
		if len(lines) != 2*4+3*(2+2*2*2) || lines[0] != "route-first" || lines[2] != "route-warm-up" || lines[8] != "remove" ||
			lines[9] != "route-after-remove-1" || lines[10] != "done-after-remove-1" || lines[13] != "put" {
			t.Errorf("%s: ops %q", url, lines)
		}
		want := map[string]int{"remove": 3, "put": 3, "route-after-remove-2": 3, "done-after-put-1": 3, "route-first": 1, "route-warm-up": 3}
		got := map[string]int{}
		for _, op := range rep.Ops {
			got[op.Op] = op.Calls
			// (a memory store's done can take less than the clock's step: only Redis calls must show time)
			if op.MaxUs < op.P50Us || op.P50Us < 0 || (url != "memory" && op.P50Us <= 0) {
				t.Errorf("%s: %+v", url, op)
			}
		}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("%s: %s timed %d times, want %d (ops %+v)", url, k, got[k], n, rep.Ops)
			}
		}
		if redis := url != "memory"; redis != (rep.Slowlog != nil) || redis != (rep.RedisCPU > 0) {
			t.Errorf("%s: slowlog %+v, Redis CPU %v", url, rep.Slowlog, rep.RedisCPU)
		}
		if !strings.Contains(log.String(), "route-after-put-2") {
			t.Errorf("%s: table:\n%s", url, log.String())
		}
	}
	if n, err := srv.Do(5*time.Second, "DBSIZE"); err != nil || n != "0" {
		t.Errorf("DBSIZE after the benchmark = %q, %v; want 0 (namespace dropped)", n, err)
	}
}
