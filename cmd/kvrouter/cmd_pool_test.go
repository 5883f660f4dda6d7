package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestPoolListShow: `kvrouter pool list` and `pool show` report what a real Redis store holds.
func TestPoolListShow(t *testing.T) {
	srv := testredis.Start(t)
	url := srv.URL()
	ctx := context.Background()
	st, err := statestore.Open(url, statestore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.PutPool(ctx, "chat", statestore.DefaultPoolConfig(32)); err != nil {
		t.Fatal(err)
	}
	if err := st.PutWorker(ctx, "chat", statestore.WorkerSpec{WorkerID: "w1", URL: "http://w1", DPSize: 2}, 1); err != nil {
		t.Fatal(err)
	}
	var pools []statestore.PoolInfo
	out := capture(t, func() error { return runPoolList(ctx, []string{"--store", url}) })
	if err := json.Unmarshal([]byte(out), &pools); err != nil {
		t.Fatal(err)
	}
	if len(pools) != 1 || pools[0].Name != "chat" || pools[0].Config.BlockSize != 32 || pools[0].Workers != 1 {
		t.Errorf("pool list: %s", out)
	}
	var show struct {
		Pool    string
		Config  statestore.PoolConfig
		Workers []statestore.WorkerInfo
	}
	out = capture(t, func() error { return runPoolShow(ctx, []string{"chat", "--store", url}) })
	if err := json.Unmarshal([]byte(out), &show); err != nil {
		t.Fatal(err)
	}
	if show.Pool != "chat" || len(show.Workers) != 1 || len(show.Workers[0].Ranks) != 2 {
		t.Errorf("pool show: %s", out)
	}
	if err := runPoolShow(ctx, []string{"nope", "--store", url}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("pool show of an unknown pool: %v", err)
	}
}

// TestPoolMemory: against the embedded store the pool actions say why they cannot help.
func TestPoolMemory(t *testing.T) {
	ctx := context.Background()
	for _, action := range []string{"list", "show", "migrate", "recreate"} {
		args := []string{"--store", "memory"}
		if action != "list" {
			args = append(args, "default")
		}
		if err := poolCommands[action].run(ctx, args); err == nil || !strings.Contains(err.Error(), "always empty") {
			t.Errorf("pool %s --store memory: %v", action, err)
		}
	}
}

// TestPoolMigrateRecreate: `pool migrate` and `pool recreate` on a pool whose cfg records no layout (as
// layout 1 left it; statestore's TestRedisLayout* cover the store side) print the layouts and fix it.
func TestPoolMigrateRecreate(t *testing.T) {
	srv := testredis.Start(t)
	url := srv.URL()
	ctx := context.Background()
	st, err := statestore.Open(url, statestore.OpenOptions{Prefix: "pm:"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, action := range []string{"migrate", "recreate"} {
		if err := st.PutPool(ctx, "chat", statestore.DefaultPoolConfig(32)); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.Do(5*time.Second, "HDEL", statestore.PoolKeys("pm:", "chat")[0], "layout"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.GetPool(ctx, "chat"); !errors.Is(err, statestore.ErrLayoutMismatch) {
			t.Fatalf("before %s: %v", action, err)
		}
		out := capture(t, func() error {
			return poolCommands[action].run(ctx, []string{"chat", "--store", url, "--prefix", "pm:"})
		})
		if !strings.Contains(out, `"from_layout": "1"`) || !strings.Contains(out, `"layout": 3`) {
			t.Errorf("pool %s: %s", action, out)
		}
		if cfg, err := st.GetPool(ctx, "chat"); err != nil || cfg.BlockSize != 32 {
			t.Errorf("after %s: %+v, %v", action, cfg, err)
		}
	}
}
