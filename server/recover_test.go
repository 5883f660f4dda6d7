package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testlog"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// httpDo sends one request and returns the status and body (status 0 and the error text if it failed).
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(mustRequest(t, method, url, body))
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// startServe runs Run(cfg) until its listener is up (startLifecycle).
func startServe(t *testing.T, cfg Config) (string, func()) {
	t.Helper()
	return startLifecycle(t, func(ctx context.Context, onListening func(net.Addr)) error {
		cfg.OnListening = onListening
		return Run(ctx, cfg)
	})
}

// startIngest runs RunIngest(cfg) until its listener is up (startLifecycle).
func startIngest(t *testing.T, cfg IngestConfig) (string, func()) {
	t.Helper()
	return startLifecycle(t, func(ctx context.Context, onListening func(net.Addr)) error {
		cfg.OnListening = onListening
		return RunIngest(ctx, cfg)
	})
}

// waitFor polls cond every 50 ms until it holds or 60 s pass (then fails with what's last).
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 60 s; last: %s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeRecoversRedisRestart (defect 1): Redis restarts empty under a running serve; the router
// re-declares its configured pools by itself (routes stop answering 404 unknown_pool, the pool's knobs
// come back), and /readyz answers 200 again.
func TestServeRecoversRedisRestart(t *testing.T) {
	srv := testredis.Start(t)
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", io.Discard, srv.URL()
	cfg.SetPoolKnob("chat", "block_size", 32)
	base, stop := startServe(t, cfg)
	defer stop()
	if code, body := httpDo(t, "PUT", base+"/v1/workers/w0?pool=chat", `{"url":"http://w0"}`); code != 200 {
		t.Fatalf("PUT worker: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", base+"/v1/route", `{"pool":"chat","isl":64}`); code != 200 {
		t.Fatalf("route before restart: %d %s", code, body)
	}
	srv.Restart(t)
	waitFor(t, "pool chat re-declared with its knobs", func() (bool, string) {
		code, body := httpDo(t, "GET", base+"/v1/pools/chat", "")
		return code == 200 && strings.Contains(body, `"block_size":32`), body
	})
	waitFor(t, "/readyz 200", func() (bool, string) {
		code, body := httpDo(t, "GET", base+"/readyz", "")
		return code == 200, body
	})
	// The operator-registered worker went with the store: register it again (its heartbeat would) and
	// routing resumes without restarting the router.
	if code, body := httpDo(t, "PUT", base+"/v1/workers/w0?pool=chat", `{"url":"http://w0"}`); code != 200 {
		t.Fatalf("PUT worker after restart: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", base+"/v1/route", `{"pool":"chat","isl":64}`); code != 200 {
		t.Fatalf("route after restart: %d %s", code, body)
	}
}

// TestIngestRecoversRedisRestart (defect 1): Redis restarts empty under a running ingest; after its
// grace period ingest creates its pool again and re-registers its engine's worker.
func TestIngestRecoversRedisRestart(t *testing.T) {
	srv := testredis.Start(t)
	cfg := DefaultIngestConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", io.Discard, srv.URL()
	// Nothing publishes there: the subscriber just waits; the worker is registered all the same.
	cfg.Engines = []string{"w1=tcp://127.0.0.1:1,url=http://w1:8000"}
	base, stop := startIngest(t, cfg)
	defer stop()
	st, err := statestore.Open(srv.URL(), statestore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hasWorker := hasOnlyW1(st)
	waitFor(t, "w1 registered at start", hasWorker)
	srv.Restart(t)
	waitFor(t, "w1 registered again", hasWorker)
	waitFor(t, "/readyz 200", func() (bool, string) {
		code, body := httpDo(t, "GET", base+"/readyz", "")
		return code == 200, body
	})
}

// hasOnlyW1 is a waitFor condition: the default pool of st holds exactly the ingest tests' engine worker
// w1, with its URL.
func hasOnlyW1(st statestore.Store) func() (bool, string) {
	return func() (bool, string) {
		ws, err := st.Workers(context.Background(), "default", time.Now().UnixMilli())
		if err != nil {
			return false, err.Error()
		}
		return len(ws) == 1 && ws[0].WorkerID == "w1" && ws[0].URL == "http://w1:8000", ""
	}
}

// TestIngestStartsWhileRedisIsUnreachable: an ingest started while nothing listens at its Redis address
// subscribes anyway and is not ready; when Redis comes up its keeper connects, creates the pool and
// registers the engine's worker, and it becomes ready without a restart. (Before, it exited.)
func TestIngestStartsWhileRedisIsUnreachable(t *testing.T) {
	srv := testredis.Start(t)
	srv.Stop() // its port, with nothing listening
	logs := &testlog.Buffer{}
	cfg := DefaultIngestConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", logs, srv.URL()
	cfg.RecoverInterval = 100 * time.Millisecond
	cfg.Engines = []string{"w1=tcp://127.0.0.1:1,url=http://w1:8000"}
	base, stop := startIngest(t, cfg)
	defer stop()
	if !strings.Contains(logs.String(), "state store unavailable at startup") {
		t.Fatalf("the ingest started without its startup warning; logs:\n%s", logs.String())
	}
	if code, body := httpDo(t, "GET", base+"/readyz", ""); code != 503 {
		t.Fatalf("/readyz with Redis unreachable: %d %s, want 503", code, body)
	}
	restartUntilW1Ready(t, srv, base)
}

// TestKeeperReadiness (defect 1): readiness is false while a configured pool is missing and the keeper
// waits (ingest's grace period); a router's keeper (no grace) re-declares the pool in the probe itself and
// is ready at once; a stopped Redis is not ready.
func TestKeeperReadiness(t *testing.T) {
	srv := testredis.Start(t)
	st, err := statestore.Open(srv.URL(), statestore.OpenOptions{Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	k := newKeeper(st, []PoolSetup{{Name: "p", Config: statestore.DefaultPoolConfig(16)}}, nil, nil, slog.New(slog.DiscardHandler))
	k.grace = time.Hour
	if err := k.ready(ctx); err == nil || !strings.Contains(err.Error(), `"p" is missing`) {
		t.Fatalf("ready with the pool missing: %v", err)
	}
	k.grace = 0
	if err := k.ready(ctx); err != nil {
		t.Fatalf("a router keeper's probe: %v (want the pool re-declared and ready)", err)
	}
	if _, err := st.GetPool(ctx, "p"); err != nil {
		t.Fatalf("pool after the probe: %v", err)
	}
	srv.Stop()
	if err := k.ready(ctx); err == nil {
		t.Fatal("ready with Redis stopped")
	}
}
