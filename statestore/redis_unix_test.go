package statestore_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestParseRedisURLUnix: a unix:// URL dials the socket path, keeps its credentials and database out of the
// display name, and says it is a socket.
func TestParseRedisURLUnix(t *testing.T) {
	opt, name, err := statestore.ParseRedisURL("unix://u:p@/run/redis/redis.sock?db=3")
	if err != nil {
		t.Fatal(err)
	}
	if got := opt.InitAddress; len(got) != 1 || got[0] != "/run/redis/redis.sock" {
		t.Fatalf("addresses %v", got)
	}
	if opt.DialCtxFn == nil || opt.SelectDB != 3 || opt.Username != "u" || opt.Password != "p" || opt.TLSConfig != nil {
		t.Fatalf("options %+v", opt)
	}
	if name != "unix:///run/redis/redis.sock" {
		t.Fatalf("display name %q (the socket's path, never the password)", name)
	}
}

// TestRedisUnixSocket: a store opened on a real server's Unix socket registers a pool and routes.
func TestRedisUnixSocket(t *testing.T) {
	// A short directory of its own: a socket path is limited to 107 bytes, and t.TempDir's can be longer.
	dir, err := os.MkdirTemp("", "kvr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "r.sock")
	testredis.Start(t, "--unixsocket", sock, "--unixsocketperm", "700")
	st, err := statestore.Open("unix://"+sock, statestore.OpenOptions{Fresh: true, RedisTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0", "w1")
	d, err := st.Route(ctx, statestore.RouteRequest{Pool: "default", RequestID: "a", ISL: 8, NowMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkerID != "w0" && d.WorkerID != "w1" {
		t.Fatalf("routed to %q", d.WorkerID)
	}
}
