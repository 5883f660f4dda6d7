package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestServeRedisOutage: with Redis down, /readyz and routes answer 503 store_unavailable (the error
// code a client retries on; a Retry-After, if the server sends one, is a positive number of seconds);
// the server keeps running and recovers when Redis is back (SPEC §10): every failure after the restart
// is again a 503 store_unavailable, there are at most maxRecoveryFailures of them (each one a pooled
// connection broken by the outage), and the server serves the pool again.
func TestServeRedisOutage(t *testing.T) {
	requireIntegration(t)
	r := testredis.Start(t)
	p := startRedisServe(t, r.URL(), "--store-timeout", "2s")
	p.must(t, 200, "PUT", "/v1/pools/default", `{"block_size":4}`)
	p.must(t, 200, "PUT", "/v1/workers/w0", `{"url":"u"}`)
	p.must(t, 200, "POST", "/v1/route", `{"token_ids":[1,2,3,4]}`)

	r.Stop()
	for _, path := range []string{"/readyz", "/v1/route"} {
		method, body := "GET", ""
		if path == "/v1/route" {
			method, body = "POST", `{"token_ids":[1,2,3,4]}`
		}
		start := time.Now()
		resp, b := doResp(t, p, method, path, body)
		if msg := storeUnavailable(resp, b); msg != "" {
			t.Errorf("%s with Redis down: %s", path, msg)
		}
		t.Logf("%s with Redis down: %d in %s: %s", path, resp.StatusCode, time.Since(start).Round(time.Millisecond), b)
	}
	p.must(t, 200, "GET", "/healthz", "")

	// Redis back (empty: no persistence): ready again. The client pools several connections; each one
	// that broke during the outage may fail the first call sent on it (the store retries idempotent
	// calls once, never a route, which books), so a client retries a 503 store_unavailable here — a
	// bounded number of times. The deadline only stops a broken build from polling forever.
	const maxRecoveryFailures = 8
	r.Restart(t)
	deadline := time.Now().Add(60 * time.Second)
	failures := 0
	var last []byte
	for _, step := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"PUT", "/v1/pools/default", `{"block_size":4}`},
		{"PUT", "/v1/workers/w0", `{"url":"u"}`},
		{"POST", "/v1/route", `{"token_ids":[1,2,3,4]}`},
	} {
		for {
			resp, b := doResp(t, p, step.method, step.path, step.body)
			if resp.StatusCode == 200 {
				last = b
				break
			}
			failures++
			if msg := storeUnavailable(resp, b); msg != "" {
				t.Fatalf("%s %s after Redis came back: %s", step.method, step.path, msg)
			}
			if failures > maxRecoveryFailures || time.Now().After(deadline) {
				t.Fatalf("%s %s after Redis came back: still 503 after %d failures (max %d): %s", step.method, step.path, failures, maxRecoveryFailures, b)
			}
			time.Sleep(20 * time.Millisecond) // polling interval, not a timing assumption
		}
	}
	t.Logf("recovered after %d store_unavailable answers", failures)
	if !strings.Contains(string(last), `"w0"`) {
		t.Errorf("after recovery: %s", last)
	}
}

// doResp sends a request to serve and returns the response (body closed) and its body.
func doResp(t *testing.T, p *serveProc, method, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, p.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp, b
}

// storeUnavailable returns "" when the answer is a 503 with error code store_unavailable and, if it
// has a Retry-After, a positive whole number of seconds; otherwise what is wrong.
func storeUnavailable(resp *http.Response, body []byte) string {
	var e struct {
		Error statestore.ErrorBody `json:"error"`
	}
	if resp.StatusCode != 503 || json.Unmarshal(body, &e) != nil || e.Error.Code != "store_unavailable" {
		return fmt.Sprintf("%d %s, want 503 store_unavailable", resp.StatusCode, body)
	}
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(ra); err != nil || n <= 0 {
			return fmt.Sprintf("Retry-After %q, want a positive number of seconds", ra)
		}
	}
	return ""
}
