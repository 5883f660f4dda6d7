package server

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	testRouteToken = "route-0123456789abcdef"
	testAdminToken = "admin-0123456789abcdef"
)

// logFile returns a file to log into (concurrent writes are single syscalls) and a reader of it.
func logFile(t *testing.T) (*os.File, func() string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

func writeTokens(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("# scope token\nroute "+testRouteToken+"\n\nadmin "+testAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// authDo sends a request with an optional bearer token; it returns status and body.
func authDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req := mustRequest(t, method, url, body)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeAccessControl (defect 2, SPEC §7.3): with --auth-tokens, serve answers 401 without a
// known token, 403 to a route token on admin endpoints (OpenAI error shape on the gateway's), lets
// each scope through, keeps /healthz and /readyz open, and never logs a token.
func TestServeAccessControl(t *testing.T) {
	logs, logText := logFile(t)
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.LogLevel = "127.0.0.1:0", logs, "debug"
	cfg.AuthTokens = writeTokens(t)
	base, stop := startServe(t, cfg)
	for _, c := range []struct {
		method, path, token, body string
		want                      int
		contains                  string
	}{
		{"GET", "/healthz", "", "", 200, "ok"},
		{"GET", "/readyz", "", "", 200, "ready"},
		{"POST", "/v1/route", "", `{"isl":16}`, 401, `"unauthenticated"`},
		{"POST", "/v1/route", "not-a-token-at-all-xx", `{"isl":16}`, 401, "unknown bearer token"},
		{"PUT", "/v1/pools/evil", "", `{}`, 401, `"unauthenticated"`},
		{"PUT", "/v1/pools/evil", testRouteToken, `{}`, 403, `"permission_denied"`},
		{"PUT", "/v1/workers/w0", testRouteToken, `{"url":"http://w0"}`, 403, "admin"},
		{"DELETE", "/v1/workers/w0", testRouteToken, ``, 403, "admin"},
		{"POST", "/v1/events", testRouteToken, `[]`, 403, "admin"},
		{"GET", "/v1/pools", testRouteToken, ``, 403, "admin"},
		{"PUT", "/v1/workers/w0", testAdminToken, `{"url":"http://w0"}`, 200, "w0"},
		{"POST", "/v1/route", testRouteToken, `{"isl":16,"request_id":"r1"}`, 200, `"worker_id":"w0"`},
		{"POST", "/v1/requests/r1/done", testRouteToken, ``, 200, ""},
		{"POST", "/v1/route", testAdminToken, `{"isl":16}`, 200, `"worker_id":"w0"`}, // admin implies route
		{"POST", "/v1/chat/completions", "", `{"model":"m","messages":[]}`, 401, `"type":"invalid_request_error"`},
		{"GET", "/v1/models", testRouteToken, ``, 200, `"object":"list"`},
		{"GET", "/debug/anything", testRouteToken, ``, 403, "admin"}, // unknown paths need admin
	} {
		code, body := authDo(t, c.method, base+c.path, c.token, c.body)
		if code != c.want || !strings.Contains(body, c.contains) {
			t.Errorf("%s %s (token %q): %d %s; want %d containing %q", c.method, c.path, c.token, code, body, c.want, c.contains)
		}
	}
	stop()
	for _, tok := range []string{testRouteToken, testAdminToken, "not-a-token-at-all-xx"} {
		if strings.Contains(logText(), tok) {
			t.Errorf("the log holds token %q", tok)
		}
	}
}

// TestListenRule (defect 2): serve and ingest refuse a non-loopback address without tokens, unless
// --insecure-no-auth (then warn); the default address is loopback.
func TestListenRule(t *testing.T) {
	if DefaultConfig().Addr != "127.0.0.1:8080" || DefaultIngestConfig().Addr != "127.0.0.1:8081" {
		t.Fatalf("defaults %q, %q: want loopback", DefaultConfig().Addr, DefaultIngestConfig().Addr)
	}
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput = "0.0.0.0:0", io.Discard
	if err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "non-loopback") {
		t.Fatalf("serve on 0.0.0.0 without tokens: %v", err)
	}
	icfg := DefaultIngestConfig()
	icfg.Addr, icfg.LogOutput = ":0", io.Discard
	if err := RunIngest(context.Background(), icfg); err == nil || !strings.Contains(err.Error(), "non-loopback") {
		t.Fatalf("ingest on :0 without tokens: %v", err)
	}
	logs, logText := logFile(t)
	cfg.InsecureNoAuth, cfg.LogOutput = true, logs
	_, stop := startServe(t, cfg)
	stop()
	if !strings.Contains(logText(), "insecure-no-auth") {
		t.Errorf("no warning logged for --insecure-no-auth:\n%s", logText())
	}
	for addr, want := range map[string]bool{"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, ":1": false, "0.0.0.0:1": false, "10.0.0.1:1": false, "[::]:1": false} {
		if isLoopback(addr) != want {
			t.Errorf("isLoopback(%q) = %v", addr, !want)
		}
	}
}

// TestIngestAccessControl (defect 2): ingest checks the same scopes (events and streams: admin).
func TestIngestAccessControl(t *testing.T) {
	cfg := DefaultIngestConfig()
	cfg.Addr, cfg.LogOutput = "127.0.0.1:0", io.Discard
	cfg.AuthTokens = writeTokens(t)
	base, stop := startIngest(t, cfg)
	defer stop()
	ev := `{"worker_id":"w1","event":{"data":{"cleared":{}}}}`
	for _, c := range []struct {
		method, path, token, body string
		want                      int
	}{
		{"GET", "/healthz", "", "", 200},
		{"GET", "/readyz", "", "", 200},
		{"GET", "/metrics", "", "", 200},
		{"POST", "/v1/events", "", ev, 401},
		{"POST", "/v1/events", testRouteToken, ev, 403},
		{"POST", "/v1/events", testAdminToken, ev, 200},
		{"GET", "/v1/ingest/streams", testRouteToken, "", 403},
		{"GET", "/v1/ingest/streams", testAdminToken, "", 200},
	} {
		if code, body := authDo(t, c.method, base+c.path, c.token, c.body); code != c.want {
			t.Errorf("%s %s (token %q): %d %s; want %d", c.method, c.path, c.token, code, body, c.want)
		}
	}
}

// TestMetricsAddr (defect 2): --metrics-addr moves /metrics off the main address.
func TestMetricsAddr(t *testing.T) {
	logs, logText := logFile(t)
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.MetricsAddr = "127.0.0.1:0", logs, "127.0.0.1:0"
	base, stop := startServe(t, cfg)
	defer stop()
	_, line, _ := strings.Cut(logText(), "msg=\"metrics listening\" addr=")
	maddr, _, _ := strings.Cut(line, "\n")
	maddr = strings.TrimSpace(maddr)
	if maddr == "" {
		t.Fatalf("no metrics listener logged:\n%s", logText())
	}
	if code, body := httpDo(t, "GET", "http://"+maddr+"/metrics", ""); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Fatalf("GET /metrics on the metrics address: %d %.200s", code, body)
	}
	if code, _ := httpDo(t, "GET", base+"/metrics", ""); code != 404 {
		t.Fatalf("GET /metrics on the main address: %d, want 404", code)
	}
}
