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
	addrc := make(chan net.Addr, 1)
	cfg.OnListening = func(a net.Addr) { addrc <- a }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	var base string
	select {
	case a := <-addrc:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("Run returned before listening: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not listen within 60s")
	}
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
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of cancel")
	}
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
