package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRunLifecycle: Run declares the configured pools, serves on a free port, answers /metrics and the
// pool API, and returns nil once ctx ends.
func TestRunLifecycle(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.LogOutput = io.Discard
	cfg.SetPoolKnob("chat", "block_size", 32)
	base, stop := startLifecycle(t, func(ctx context.Context, onListening func(net.Addr)) error {
		cfg.OnListening = onListening
		return Run(ctx, cfg)
	})
	for path, want := range map[string]string{"/v1/pools/chat": `"block_size":32`, "/metrics": "go_goroutines", "/healthz": ""} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d %s; want 200 containing %q", path, resp.StatusCode, body, want)
		}
	}
	stop()
}

// TestRunInvalidConfig: configuration errors are reported before anything is opened.
func TestRunInvalidConfig(t *testing.T) {
	for _, c := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.LogFormat = "xml" }, "log-format"},
		{func(c *Config) { c.Engines = []string{"w1"} }, "--engine"},
		{func(c *Config) { c.Engines, c.EnginePool = []string{"w1=tcp://127.0.0.1:1"}, "bad pool" }, "pool"},
		{func(c *Config) { c.Store = "mongodb://x" }, "mongodb"},
	} {
		cfg := DefaultConfig()
		cfg.Addr, cfg.LogOutput = "127.0.0.1:0", io.Discard
		c.mutate(&cfg)
		err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Run(%+v) = %v; want an error naming %q", cfg, err, c.want)
		}
	}
}

// TestRunIngestLifecycle: RunIngest (no engines: HTTP events only) creates the pool, answers POST
// /v1/events and GET /v1/pools, and returns nil once ctx ends.
func TestRunIngestLifecycle(t *testing.T) {
	cfg := DefaultIngestConfig()
	cfg.Addr, cfg.LogOutput = "127.0.0.1:0", io.Discard
	base, stop := startLifecycle(t, func(ctx context.Context, onListening func(net.Addr)) error {
		cfg.OnListening = onListening
		return RunIngest(ctx, cfg)
	})
	resp, err := http.DefaultClient.Do(mustRequest(t, "POST", base+"/v1/events",
		`{"worker_id":"w1","event":{"data":{"stored":{"parent_hash":null,"token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"blocks":[{"block_hash":1}]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// No engine registered w1: the event is received and counted as for an unknown worker.
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"received":1`) || !strings.Contains(string(body), `"unknown_worker":1`) {
		t.Errorf("POST /v1/events: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get(base + "/v1/pools")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"pool":"default"`) || !strings.Contains(string(body), `"block_size":16`) {
		t.Errorf("GET /v1/pools: %s; want the default pool created with block size 16", body)
	}
	stop()
	bad := DefaultIngestConfig()
	bad.BlockSize = 0
	if err := RunIngest(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "block-size") {
		t.Errorf("block size 0: %v", err)
	}
}

func mustRequest(t *testing.T, method, url, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// startLifecycle runs run (Run or RunIngest) until it reports its listener, and returns the base URL
// and a stop function that cancels run and fails the test unless it returns nil.
func startLifecycle(t *testing.T, run func(ctx context.Context, onListening func(net.Addr)) error) (string, func()) {
	t.Helper()
	addrc := make(chan net.Addr, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- run(ctx, func(a net.Addr) { addrc <- a }) }()
	select {
	case a := <-addrc:
		return "http://" + a.String(), func() {
			t.Helper()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("after cancel: %v", err)
				}
			case <-time.After(60 * time.Second):
				t.Fatal("did not return within 60s of cancel")
			}
		}
	case err := <-done:
		t.Fatalf("returned before listening: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("did not listen within 60s")
	}
	return "", nil
}
