package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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

// TestPoolMemoryAndNotYet: against the embedded store the pool actions say why they cannot help;
// migrate and recreate refuse clearly instead of pretending.
func TestPoolMemoryAndNotYet(t *testing.T) {
	ctx := context.Background()
	for _, action := range []string{"list", "show"} {
		args := []string{"--store", "memory"}
		if action == "show" {
			args = append(args, "default")
		}
		if err := poolCommands[action].run(ctx, args); err == nil || !strings.Contains(err.Error(), "always empty") {
			t.Errorf("pool %s --store memory: %v", action, err)
		}
	}
	for _, action := range []string{"migrate", "recreate"} {
		err := poolCommands[action].run(ctx, []string{"default", "--store", "redis://127.0.0.1:1"})
		if err == nil || !strings.Contains(err.Error(), "not yet") || !strings.Contains(err.Error(), "layout") {
			t.Errorf("pool %s: %v", action, err)
		}
	}
}
