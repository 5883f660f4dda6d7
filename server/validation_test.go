package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestServeBadInput (defect 8): over a real socket, bodies without a prompt and explicit zero values
// are 400, a worker without a URL is 400, invalid UTF-8 is refused (never rewritten), and over-long
// URIs and headers get 414 and 431 rather than 400 or a reset; ingest answers 431 too.
func TestServeBadInput(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput = "127.0.0.1:0", io.Discard
	base, stop := startServe(t, cfg)
	defer stop()
	for _, c := range []struct {
		method, path, body string
		want               int
		contains           string
	}{
		{"POST", "/v1/route", `null`, 400, "want an object"},
		{"POST", "/v1/route", `{}`, 400, "needs a prompt"},
		{"POST", "/v1/route", `{"isl":16,"block_size":0}`, 400, "block_size"},
		{"POST", "/v1/route", `{"isl":16,"request_id":""}`, 400, "request_id"},
		{"POST", "/v1/route", "{\"isl\":16,\"session_id\":\"\xff\"}", 400, "UTF-8"},
		{"PUT", "/v1/workers/x", `{}`, 400, "url is required"},
		{"PUT", "/v1/workers/%C3", `{"url":"http://x"}`, 400, "UTF-8"},
		{"GET", "/v1/workers?pool=" + strings.Repeat("p", 5000), ``, 414, "uri_too_long"},
	} {
		if code, body := httpDo(t, c.method, base+c.path, c.body); code != c.want || !strings.Contains(body, c.contains) {
			t.Errorf("%s %.50s %.40q: %d %s; want %d containing %q", c.method, c.path, c.body, code, body, c.want, c.contains)
		}
	}
	req := mustRequest(t, "GET", base+"/healthz", "")
	req.Header.Set("X-Big", strings.Repeat("h", 10000))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("huge header: %v (want a 431 answer, not a reset)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("huge header: %d, want 431", resp.StatusCode)
	}

	icfg := DefaultIngestConfig()
	icfg.Addr, icfg.LogOutput = "127.0.0.1:0", io.Discard
	ibase, istop := startIngest(t, icfg)
	defer istop()
	req = mustRequest(t, "GET", ibase+"/healthz", "")
	req.Header.Set("X-Big", strings.Repeat("h", 20000))
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("ingest huge header: %d, want 431", resp.StatusCode)
	}
}
