package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testlog"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// routeOnce posts a route and returns status, body and the Retry-After header.
func routeOnce(t *testing.T, base string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/route", "application/json", strings.NewReader(`{"isl":16}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("Retry-After")
}

// TestStoreTransientStates (defect 5, SPEC §8): a Redis stalled past --store-timeout answers 503
// "timeout" and a Redis LOADING its dataset answers 503 "store_unavailable", both with Retry-After and
// never 500; routing resumes by itself afterwards.
func TestStoreTransientStates(t *testing.T) {
	srv := testredis.Start(t)
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", io.Discard, srv.URL()
	cfg.StoreTimeout = 300 * time.Millisecond
	base, stop := startServe(t, cfg)
	defer stop()
	if code, body := httpDo(t, "PUT", base+"/v1/workers/w0", `{"url":"http://w0"}`); code != 200 {
		t.Fatalf("PUT worker: %d %s", code, body)
	}

	// A stall: DEBUG SLEEP blocks the server for 3 s, 10x the store timeout.
	slept := make(chan error, 1)
	go func() { _, err := srv.Do(30*time.Second, "DEBUG", "SLEEP", "3"); slept <- err }()
	waitFor(t, "503 timeout during DEBUG SLEEP", func() (bool, string) {
		code, body, ra := routeOnce(t, base)
		if code == 500 {
			t.Fatalf("500 during a stall: %s", body)
		}
		return code == 503 && strings.Contains(body, `"code":"timeout"`) && ra == "1", body
	})
	if err := <-slept; err != nil {
		t.Fatal(err)
	}

	// LOADING: enough keys, loaded slowly (key-load-delay, µs per key) and answering other clients
	// between chunks (loading-process-events-interval-bytes), make DEBUG RELOAD take seconds.
	for _, c := range [][]string{{"DEBUG", "POPULATE", "20000", "filler", "64"},
		{"CONFIG", "SET", "key-load-delay", "200"}, {"CONFIG", "SET", "loading-process-events-interval-bytes", "1024"}} {
		if _, err := srv.Do(30*time.Second, c...); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
	reloaded := make(chan error, 1)
	go func() { _, err := srv.Do(120*time.Second, "DEBUG", "RELOAD"); reloaded <- err }()
	sawLoading := false
	waitFor(t, "503 store_unavailable while LOADING", func() (bool, string) {
		code, body, ra := routeOnce(t, base)
		if code == 500 {
			t.Fatalf("500 while loading: %s", body)
		}
		sawLoading = code == 503 && strings.Contains(body, `"code":"store_unavailable"`) && strings.Contains(body, "LOADING") && ra == "1"
		return sawLoading, body
	})
	code, body := httpDo(t, "GET", base+"/readyz", "")
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do(5*time.Second, "CONFIG", "SET", "key-load-delay", "0"); err != nil {
		t.Fatal(err)
	}
	t.Logf("readyz during or right after loading: %d %s", code, body)
	waitFor(t, "routing resumes after loading", func() (bool, string) {
		code, body, _ := routeOnce(t, base)
		return code == 200, body
	})
}

// TestServeStartsWhileStoreWritesStall (SPEC §8 "Losing Redis"): a router whose pools cannot be declared at
// startup because the store does not answer in time serves instead of exiting: /readyz answers 503 until
// the store answers, then the keeper declares the configured pools and the router is ready and routes.
// (It exited on the first failed declaration: a FUNCTION LOAD slowed past --redis-timeout on a loaded
// machine stopped a chaos test's router.) CLIENT PAUSE … WRITE holds every write (FUNCTION LOAD, the
// pool's declaration) while reads answer, until the test unpauses it: no step races the clock.
func TestServeStartsWhileStoreWritesStall(t *testing.T) {
	srv := testredis.Start(t)
	if _, err := srv.Do(5*time.Second, "CLIENT", "PAUSE", "600000", "WRITE"); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	unpause := func() {
		if !unpaused {
			unpaused = true
			if _, err := srv.Do(5*time.Second, "CLIENT", "UNPAUSE"); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer unpause()

	logs := &testlog.Buffer{}
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", logs, srv.URL()
	cfg.StoreTimeout = 300 * time.Millisecond
	base, stop := startServe(t, cfg)
	defer stop()
	if !strings.Contains(logs.String(), "state store unavailable at startup") {
		t.Fatalf("the router started without its startup warning; logs:\n%s", logs.String())
	}
	if code, body := httpDo(t, "GET", base+"/readyz", ""); code != 503 {
		t.Fatalf("/readyz while the pools are not declared: %d %s, want 503", code, body)
	}

	unpause()
	checkDeferredDeclaration(t, base, logs)
}

// checkDeferredDeclaration waits for a router that started without its store to turn ready, then checks
// that its configured pool was declared and that it routes.
func checkDeferredDeclaration(t *testing.T, base string, logs *testlog.Buffer) {
	t.Helper()
	waitFor(t, "ready once the store answers", func() (bool, string) {
		code, body := httpDo(t, "GET", base+"/readyz", "")
		return code == 200, body
	})
	if code, body := httpDo(t, "GET", base+"/v1/pools/default", ""); code != 200 {
		t.Fatalf("the default pool after the deferred declaration: %d %s", code, body)
	}
	if code, body := httpDo(t, "PUT", base+"/v1/workers/w0", `{"url":"http://w0"}`); code != 200 {
		t.Fatalf("PUT worker: %d %s", code, body)
	}
	if code, body, _ := routeOnce(t, base); code != 200 {
		t.Fatalf("route after recovery: %d %s", code, body)
	}
	if !strings.Contains(logs.String(), "configured pools declared") {
		t.Fatalf("no log of the deferred declaration; logs:\n%s", logs.String())
	}
}

// TestServeStartsWhileRedisIsUnreachable: a router started while nothing listens at its Redis address
// (Redis down or restarting, a failover, a DNS record not published yet) serves anyway: not ready, and
// every store-backed request answers 503 store_unavailable with Retry-After. When Redis comes up, the
// keeper connects, declares the configured pools, and the router becomes ready and routes, without a
// restart. (Before, serve exited: the Redis client could not be created.)
func TestServeStartsWhileRedisIsUnreachable(t *testing.T) {
	srv := testredis.Start(t)
	srv.Stop() // its port, with nothing listening

	logs := &testlog.Buffer{}
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", logs, srv.URL()
	cfg.RecoverInterval = 100 * time.Millisecond
	base, stop := startServe(t, cfg)
	defer stop()
	if !strings.Contains(logs.String(), "state store unreachable at startup") {
		t.Fatalf("the router started without its startup warning; logs:\n%s", logs.String())
	}
	if code, body := httpDo(t, "GET", base+"/readyz", ""); code != 503 {
		t.Fatalf("/readyz with Redis unreachable: %d %s, want 503", code, body)
	}
	code, body, retry := routeOnce(t, base)
	if code != 503 || !strings.Contains(body, "store_unavailable") || retry == "" {
		t.Fatalf("route with Redis unreachable: %d %s (Retry-After %q), want 503 store_unavailable with Retry-After", code, body, retry)
	}

	srv.Restart(t)
	checkDeferredDeclaration(t, base, logs)
}

// serveWithEngine starts serve over srv's address with one in-process engine, w1, that nothing publishes
// on (its subscriber just waits; the worker is registered all the same).
func serveWithEngine(t *testing.T, srv *testredis.Server) (string, *testlog.Buffer, func()) {
	t.Helper()
	logs := &testlog.Buffer{}
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", logs, srv.URL()
	cfg.RecoverInterval = 100 * time.Millisecond
	cfg.Engines = []string{"w1=tcp://127.0.0.1:1,url=http://w1:8000"}
	base, stop := startServe(t, cfg)
	return base, logs, stop
}

// restartUntilW1Ready starts srv again and waits until the process at base registered w1 there and is
// ready; it returns a store open on srv (closed by t.Cleanup).
func restartUntilW1Ready(t *testing.T, srv *testredis.Server, base string) statestore.Store {
	t.Helper()
	srv.Restart(t)
	st, err := statestore.Open(srv.URL(), statestore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	waitFor(t, "w1 registered once Redis listens", hasOnlyW1(st))
	waitFor(t, "/readyz 200", func() (bool, string) {
		code, body := httpDo(t, "GET", base+"/readyz", "")
		return code == 200, body
	})
	return st
}

// TestServeWithEnginesStartsWhileRedisIsUnreachable: serve with in-process engines (--engine) started
// while nothing listens at its Redis address subscribes with the engine pool's configured block size and
// serves, not ready; once Redis listens the keeper connects, declares the pool, registers the engine's
// worker and the router is ready. (Before, it exited: the engines' setup read the pool from the store.)
func TestServeWithEnginesStartsWhileRedisIsUnreachable(t *testing.T) {
	srv := testredis.Start(t)
	srv.Stop()
	base, _, stop := serveWithEngine(t, srv)
	defer stop()
	if code, body := httpDo(t, "GET", base+"/readyz", ""); code != 503 {
		t.Fatalf("/readyz with Redis unreachable: %d %s, want 503", code, body)
	}
	st := restartUntilW1Ready(t, srv, base)
	pc, err := st.GetPool(context.Background(), "default")
	if err != nil || pc.BlockSize != DefaultBlockSize {
		t.Fatalf("engine pool after the deferred declaration: %+v %v, want block_size %d", pc, err, DefaultBlockSize)
	}
}

// TestServeWithEnginesRefusesAnotherBlockSize: when the store answers at last and the engines' pool
// already exists there with a block size other than the configured one the subscribers were started
// with, the router stays not ready and says why (every event would be rejected otherwise).
func TestServeWithEnginesRefusesAnotherBlockSize(t *testing.T) {
	// Persisted, so that the pool written now is there when the server comes back.
	srv := testredis.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	st, err := statestore.Open(srv.URL(), statestore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.PutPool(context.Background(), "default", statestore.DefaultPoolConfig(32)); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	base, logs, stop := serveWithEngine(t, srv)
	defer stop()
	srv.Restart(t)
	waitFor(t, "/readyz naming the block size", func() (bool, string) {
		code, body := httpDo(t, "GET", base+"/readyz", "")
		return code == 503 && strings.Contains(body, "block_size 32"), body
	})
	waitFor(t, "the error logged", func() (bool, string) {
		return strings.Contains(logs.String(), "has block_size 32 in the store"), logs.String()
	})
}
