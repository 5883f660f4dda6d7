package integration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestServeRedisOutage: with Redis down, /readyz fails and routes answer 503 with the reason; the server
// keeps running and recovers when Redis is back (SPEC §10).
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
		st, b, err := p.do(method, path, body)
		if err != nil {
			t.Fatalf("%s with Redis down: %v", path, err)
		}
		var e struct {
			Error statestore.ErrorBody `json:"error"`
		}
		if st != 503 || json.Unmarshal(b, &e) != nil || (e.Error.Code != "store_unavailable" && e.Error.Code != "timeout") {
			t.Errorf("%s with Redis down: %d %s (after %s)", path, st, b, time.Since(start))
		}
		t.Logf("%s with Redis down: %d in %s: %s", path, st, time.Since(start).Round(time.Millisecond), b)
	}
	p.must(t, 200, "GET", "/healthz", "")

	// Redis back (empty: no persistence): ready again. A connection that broke during the outage may fail
	// the first non-idempotent call (503, never retried by the store), so the client retries the pool PUT.
	r.Restart(t)
	deadline := time.Now().Add(60 * time.Second)
	for _, path := range []string{"/readyz", "/v1/pools/default"} {
		for {
			method, body := "GET", ""
			if path != "/readyz" {
				method, body = "PUT", `{"block_size":4}`
			}
			st, _, _ := p.do(method, path, body)
			if st == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not 200 after Redis came back", path)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	p.must(t, 200, "PUT", "/v1/workers/w0", `{"url":"u"}`)
	if b := p.must(t, 200, "POST", "/v1/route", `{"token_ids":[1,2,3,4]}`); !strings.Contains(string(b), `"w0"`) {
		t.Errorf("after recovery: %s", b)
	}
}
