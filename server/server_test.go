package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
)

// blockingStore holds Route calls until release is closed.
type blockingStore struct {
	statestore.Store
	entered chan struct{}
	release chan struct{}
}

func (b *blockingStore) Route(ctx context.Context, req statestore.RouteRequest) (statestore.Decision, error) {
	b.entered <- struct{}{}
	<-b.release
	return b.Store.Route(ctx, req)
}

func newServer(t *testing.T, st statestore.Store, opts Options) (*Server, *api.API) {
	t.Helper()
	rt := core.New(st, core.Options{})
	ctx := context.Background()
	if err := rt.PutPool(ctx, "default", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := rt.PutWorker(ctx, "default", statestore.WorkerSpec{WorkerID: "w0", URL: "u"}, 0); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := api.NewMetrics(reg)
	a := api.New(rt, api.Options{Metrics: m})
	opts.Gatherer = reg
	s, err := New(a, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, a
}

// startServing serves s on a free loopback port: its base URL, the function that starts the shutdown,
// and Serve's result.
func startServing(t *testing.T, s *Server) (base string, cancel func(), served <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- s.Serve(ctx, ln) }()
	return "http://" + ln.Addr().String(), cancel, ch
}

// serveLoopback serves s on a free loopback port until the test ends and returns its base URL.
func serveLoopback(t *testing.T, s *Server) string {
	t.Helper()
	base, cancel, served := startServing(t, s)
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return base
}

// TestGracefulShutdown: a request in flight when shutdown starts completes; Serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	bs := &blockingStore{Store: statestore.NewMemory(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	s, _ := newServer(t, bs, DefaultOptions())
	base, cancel, served := startServing(t, s)
	type result struct {
		status int
		body   string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Post(base+"/v1/route", "application/json", strings.NewReader(`{"token_ids":[1,2,3,4]}`))
		if err != nil {
			res <- result{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- result{status: resp.StatusCode, body: string(b)}
	}()
	<-bs.entered
	cancel()
	// Shutdown has begun once the listener refuses new connections.
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepting after shutdown began")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(bs.release)
	r := <-res
	if r.err != nil || r.status != 200 || !strings.Contains(r.body, `"worker_id":"w0"`) {
		t.Fatalf("in-flight request: %d %s %v", r.status, r.body, r.err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestServerBasics(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxBodyBytes = 4096
	s, _ := newServer(t, statestore.NewMemory(), opts)
	base := serveLoopback(t, s)
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: 30 * time.Second}}
	req, _ := http.NewRequest("POST", base+"/v1/route", strings.NewReader(strings.Repeat(" ", 8192)))
	req.Header.Set("Expect", "100-continue")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(b), `"body_too_large"`) || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("huge body: %d %s %v", resp.StatusCode, b, resp.Header)
	}
	resp, err = http.Post(base+"/v1/route", "application/json", strings.NewReader(`{"token_ids":[1,2,3,4]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("route: %d %s", resp.StatusCode, b)
	}
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `kvrouter_decisions_total{kind="route",outcome="ok",pool="default"} 1`) {
		t.Errorf("metrics:\n%s", b)
	}
}

func TestOptionsAndConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for _, c := range []struct {
		mut  func(*Config)
		want string
	}{
		{func(c *Config) { c.MaxBodyBytes = 10 }, "max-body-bytes"},
		{func(c *Config) { c.ReadTimeout = 0 }, "read-timeout"},
		{func(c *Config) { c.ShutdownTimeout = -1 }, "shutdown-timeout"},
		{func(c *Config) { c.LogFormat = "xml" }, "log-format"},
		{func(c *Config) { c.MaxEvents = 0 }, "max-events"},
		{func(c *Config) { c.MetricsMaxWorkers = -1 }, "metrics-max-workers"},
		{func(c *Config) { c.MetricsMaxWorkers = 4097 }, "metrics-max-workers"},
		{func(c *Config) { c.SetPoolKnob("p", "temperature", -1.0) }, "pools.p"},
		{func(c *Config) { c.SetPoolKnob("p", "preset", "turbo") }, "preset"},
		{func(c *Config) { c.SetPoolKnob("p", "colour", "red") }, "colour"},
	} {
		cfg := DefaultConfig()
		c.mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %q, got %v", c.want, err)
		}
	}
}

// TestServeStopsWhenCancelledBeforeServing: a context that ends before Serve's goroutine reaches
// fasthttp's Serve (a server stopped right after it listens, on a busy box) must still stop it. fasthttp's
// Shutdown closes only listeners its Serve registered, so without Serve closing ln itself this hung
// forever (TestListenRule did, under CI load). With one P the goroutine cannot run before the shutdown,
// which makes the old order certain rather than likely.
func TestServeStopsWhenCancelledBeforeServing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i := 0; i < 20; i++ {
		s, _ := newServer(t, statestore.NewMemory(), DefaultOptions())
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, ln) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Serve after an early cancel: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("Serve did not return within 60 s of a cancel that came before it served")
		}
	}
}
