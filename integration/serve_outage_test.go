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

	// Redis back (empty: no persistence): ready again. The client pools several connections; each one
	// that broke during the outage may fail the first call sent on it (the store retries idempotent
	// calls once, never a route, which books), so a client retries a 503 store_unavailable here.
	r.Restart(t)
	deadline := time.Now().Add(60 * time.Second)
	var last []byte
	for _, step := range []struct{ method, path, body string }{
		{"GET", "/readyz", ""},
		{"PUT", "/v1/pools/default", `{"block_size":4}`},
		{"PUT", "/v1/workers/w0", `{"url":"u"}`},
		{"POST", "/v1/route", `{"token_ids":[1,2,3,4]}`},
	} {
		for {
			st, b, _ := p.do(step.method, step.path, step.body)
			if st == 200 {
				last = b
				break
			}
			if st != 503 || time.Now().After(deadline) {
				t.Fatalf("%s %s after Redis came back: %d %s", step.method, step.path, st, b)
			}
			time.Sleep(20 * time.Millisecond) // polling interval, not a timing assumption
		}
	}
	if !strings.Contains(string(last), `"w0"`) {
		t.Errorf("after recovery: %s", last)
	}
}
