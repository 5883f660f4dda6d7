package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

func newTestAPI(t testing.TB) *API {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	st := InstrumentStore(statestore.NewMemory(), m)
	rt := core.New(st, core.Options{PoolCacheTTL: -1})
	if err := rt.PutPool(context.Background(), "default", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	a := New(rt, Options{Metrics: m})
	for _, w := range []string{"w0", "w1"} {
		if r := a.Do(context.Background(), Request{Method: "PUT", RawPath: "/v1/workers/" + w, Body: []byte(`{"url":"http://` + w + `"}`)}); r.Status != 200 {
			t.Fatalf("put worker: %d %s", r.Status, r.Body)
		}
	}
	return a
}

func do(a *API, method, path, body string, hdr map[string]string) Response {
	q := map[string]string{}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		for _, kv := range strings.Split(path[i+1:], "&") {
			k, v, _ := strings.Cut(kv, "=")
			q[k] = v
		}
		path = path[:i]
	}
	return a.Do(context.Background(), Request{Method: method, RawPath: path, Body: []byte(body),
		Query:  func(k string) string { return q[k] },
		Header: func(k string) string { return hdr[k] }})
}

func TestHappyPath(t *testing.T) {
	a := newTestAPI(t)
	r := do(a, "POST", "/v1/events", `{"worker_id":"w1","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":10,"tokens_hash":7},{"block_hash":11,"tokens_hash":8}]}}}}
{"worker_id":"w1","event":{"event_id":2,"data":{"removed":{"block_hashes":[11]}}}}`, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"applied":2`) {
		t.Fatalf("events: %d %s", r.Status, r.Body)
	}
	r = do(a, "POST", "/v1/route", `{"local_hashes":[7,8],"request_id":"a","random":0}`, map[string]string{"X-Session-ID": "s1"})
	var d statestore.Decision
	if r.Status != 200 || json.Unmarshal(r.Body, &d) != nil || d.WorkerID != "w1" || d.OverlapBlocks != 1 || d.URL != "http://w1" {
		t.Fatalf("route: %d %s", r.Status, r.Body)
	}
	if r = do(a, "POST", "/v1/requests/a/prefill_done", "", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"found":true`) {
		t.Fatalf("prefill_done: %d %s", r.Status, r.Body)
	}
	if r = do(a, "POST", "/v1/requests/a/done", "", nil); r.Status != 200 {
		t.Fatalf("done: %d %s", r.Status, r.Body)
	}
	if r = do(a, "POST", "/v1/requests/a/done", "", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"found":false`) {
		t.Fatalf("done again (idempotent): %d %s", r.Status, r.Body)
	}
	if r = do(a, "POST", "/v1/route/explain", `{"token_ids":[1,2,3,4,5]}`, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"candidates"`) {
		t.Fatalf("explain: %d %s", r.Status, r.Body)
	}
	if r = do(a, "GET", "/v1/pools", "", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"workers":2`) {
		t.Fatalf("pools: %d %s", r.Status, r.Body)
	}
	if r = do(a, "PUT", "/v1/pools/big", `{"block_size":32,"temperature":0.5}`, nil); r.Status != 200 {
		t.Fatalf("put pool: %d %s", r.Status, r.Body)
	}
	if r = do(a, "PUT", "/v1/workers/w0?pool=big", `{"url":"u","block_size":32}`, nil); r.Status != 200 {
		t.Fatalf("put worker in pool big: %d %s", r.Status, r.Body)
	}
	if r = do(a, "GET", "/v1/workers?pool=big", "", nil); r.Status != 200 || !strings.Contains(string(r.Body), `"worker_id":"w0"`) {
		t.Fatalf("workers big: %d %s", r.Status, r.Body)
	}
	if r = do(a, "DELETE", "/v1/workers/w0?pool=big", "", nil); r.Status != 200 {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if r = do(a, "GET", "/readyz", "", nil); r.Status != 200 {
		t.Fatalf("readyz: %d %s", r.Status, r.Body)
	}
}

func TestSessionHeader(t *testing.T) {
	a := newTestAPI(t)
	if r := do(a, "PUT", "/v1/pools/default", `{"session_affinity_ttl_ms":60000}`, nil); r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	first := ""
	for i, h := range []string{"X-Session-ID", "X-Dynamo-Session-ID", "X-Session-ID"} {
		// random 0.99 picks the last of the tied workers unless the binding wins.
		r := do(a, "POST", "/v1/route", `{"local_hashes":[1],"random":0.`+strings.Repeat("9", i+1)+`}`, map[string]string{h: "sess"})
		var d statestore.Decision
		if r.Status != 200 || json.Unmarshal(r.Body, &d) != nil {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
		if i == 0 {
			first = d.WorkerID
		} else if d.WorkerID != first || !d.SessionHit {
			t.Fatalf("session via %s not honoured: %s", h, r.Body)
		}
	}
}

func TestBadInput(t *testing.T) {
	a := newTestAPI(t)
	huge := `{"token_ids":[` + strings.Repeat("1,", 1<<21) + `1]}`
	cases := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/v1/route", `{`, 400, "malformed JSON"},
		{"POST", "/v1/route", ``, 400, "empty body"},
		{"POST", "/v1/route", `[]`, 400, "want an object"},
		{"POST", "/v1/route", `{"token_ids":"abc"}`, 400, `"token_ids" must be an array`},
		{"POST", "/v1/route", `{"token_ids":[-1]}`, 400, "token id"},
		{"POST", "/v1/route", `{"token_ids":[1e40]}`, 400, "token id"},
		{"POST", "/v1/route", `{"isl":1e300}`, 400, "isl"},
		{"POST", "/v1/route", `{"isl":99999999999}`, 400, "max_prompt_tokens"},
		{"POST", "/v1/route", `{"local_hashes":["x"]}`, 400, "64-bit"},
		{"POST", "/v1/route", `{"nope":1}`, 400, `unknown field "nope"`},
		{"POST", "/v1/route", `{"token_ids":[1,2],"mm_items":[{"hash":1,"offset":1,"length":2}]}`, 400, "mm_items[0]"},
		{"POST", "/v1/route", `{"token_ids":[1,2],"mm_items":[{"hash":1,"offset":0,"length":1,"x":0}]}`, 400, `unknown field "x"`},
		{"POST", "/v1/route", `{} {}`, 400, "after the JSON"},
		{"POST", "/v1/route", `{"pool":"missing"}`, 404, "unknown pool"},
		{"POST", "/v1/route", `{"random":7,"isl":16}`, 400, "random"},
		{"POST", "/v1/route", `{"config":{"temperature":"NaN"}}`, 400, "temperature"},
		{"POST", "/v1/route", `{"config":{"temperature":-1}}`, 400, "temperature"},
		{"POST", "/v1/route", `{"config":{"temperature":1e308}}`, 400, "absurd"},
		{"POST", "/v1/route", `{"config":{"block_size":4}}`, 400, "not a per-request knob"},
		{"POST", "/v1/route", `{"block_size":8,"token_ids":[1]}`, 400, "block_size"},
		{"POST", "/v1/route", `{"prompt":"hello"}`, 400, "tokenizer"},
		{"POST", "/v1/route", `{"session_id":"` + strings.Repeat("s", 300) + `"}`, 400, "session_id"},
		// Defect 8 (issue 11): no prompt, explicit zero values, invalid UTF-8, a worker without a URL.
		{"POST", "/v1/route", `null`, 400, "want an object, got JSON null"},
		{"POST", "/v1/route", `{}`, 400, "needs a prompt"},
		{"POST", "/v1/route", `{"token_ids":[]}`, 400, "needs a prompt"},
		{"POST", "/v1/route/explain", `{}`, 400, "needs a prompt"},
		{"POST", "/v1/route", `{"isl":16,"block_size":0}`, 400, "block_size must be > 0"},
		{"POST", "/v1/route", `{"isl":16,"request_id":""}`, 400, "request_id must not be empty"},
		{"POST", "/v1/route", "{\"isl\":16,\"request_id\":\"a\xffb\"}", 400, "not valid UTF-8"},
		{"POST", "/v1/route", `{"isl":16,"request_id":"a\udc00b"}`, 400, "not valid UTF-8"},
		{"PUT", "/v1/workers/w9", `{}`, 400, "url is required"},
		{"PUT", "/v1/workers/w9", `null`, 400, "want an object"},
		{"PUT", "/v1/workers/w%FF", `{"url":"u"}`, 400, "not valid UTF-8"},
		{"POST", "/v1/route", huge, 400, "max_prompt_tokens"},
		{"POST", "/v1/route", `{"pinned_worker":"ghost","token_ids":[1]}`, 503, "no eligible worker"},
		{"POST", "/v1/route/explain", `{"nope":1}`, 400, "unknown field"},
		{"GET", "/v1/route", ``, 405, "not allowed"},
		{"GET", "/v2/nothing", ``, 404, "no such endpoint"},
		{"POST", "/v1/events", `nope`, 400, "line 1"},
		{"POST", "/v1/events", `[{"worker_id":"w0"`, 400, "malformed"},
		{"POST", "/v1/events", `[{"worker_id":"w0","event":{"data":"flushed"}}]`, 400, "cleared"},
		{"POST", "/v1/events", `[{"worker_id":"w0","bogus":1,"event":{"data":"cleared"}}]`, 400, "unknown field"},
		{"POST", "/v1/events", `[{"worker_id":"w0","event":{"dp_rank":99999,"data":"cleared"}}]`, 400, "dp_rank"},
		{"POST", "/v1/events", `[{"worker_id":"w0","pool":"zzz","event":{"data":"cleared"}}]`, 400, "unknown pool"},
		{"POST", "/v1/events", `[{"worker_id":"w0","event":{"data":{"stored":{"blocks":[{"block_hash":1.5,"tokens_hash":1}]}}}}]`, 400, "64-bit"},
		{"PUT", "/v1/workers/w9", `{"url":"u","dp_size":100000}`, 400, "dp_size"},
		{"PUT", "/v1/workers/w9", `{"url":"u","block_size":8}`, 400, "block_size"},
		{"PUT", "/v1/workers/w9", `{"url":5}`, 400, `"url" must be a string`},
		{"PUT", "/v1/workers/w9", `{"url":"u","worker_id":"other"}`, 400, "differs"},
		{"PUT", "/v1/workers/w9?pool=ghost", `{"url":"u"}`, 404, "unknown pool"},
		{"PUT", "/v1/workers/w9", `{"url":"u","total_kv_blocks":-1}`, 400, "total_kv_blocks"},
		{"DELETE", "/v1/workers/ghost", ``, 404, "unknown worker"},
		{"GET", "/v1/workers?pool=ghost", ``, 404, "unknown pool"},
		{"PUT", "/v1/pools/p", `{"temperature":0.5}`, 400, "block_size"},
		{"PUT", "/v1/pools/p", `{"block_size":4,"temperature":-0.5}`, 400, "temperature"},
		{"PUT", "/v1/pools/p", `{"block_size":4,"lease_ttl_ms":1e30}`, 400, "lease_ttl_ms"},
		{"PUT", "/v1/pools/p", `{"block_size":4,"wat":1}`, 400, "unknown field"},
		{"PUT", "/v1/pools/default", `{"block_size":8}`, 409, "conflict"},
		{"POST", "/v1/requests/" + strings.Repeat("r", 300) + "/done", ``, 400, "request_id"},
	}
	for _, c := range cases {
		r := do(a, c.method, c.path, c.body, nil)
		var env errorEnvelope
		if r.Status != c.status || json.Unmarshal(r.Body, &env) != nil || env.Error.Code == "" || !strings.Contains(env.Error.Message, c.want) {
			t.Errorf("%s %s %.60s: got %d %.300s; want %d containing %q", c.method, c.path, c.body, r.Status, r.Body, c.status, c.want)
		}
	}
	// Still serving.
	if r := do(a, "POST", "/v1/route", `{"token_ids":[1,2,3,4]}`, nil); r.Status != 200 {
		t.Fatalf("after bad input: %d %s", r.Status, r.Body)
	}
}

func TestEventsPartial(t *testing.T) {
	a := newTestAPI(t)
	r := do(a, "POST", "/v1/events", `[{"worker_id":"w0","event":{"data":"cleared"}},{"worker_id":"w0","event":{"data":"bad"}}]`, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"invalid":1`) || !strings.Contains(string(r.Body), `"index":1`) {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
}

func TestStatusMapping(t *testing.T) {
	for err, want := range map[error]int{statestore.ErrInvalid: 400, statestore.ErrUnknownPool: 404, statestore.ErrUnknownWorker: 404,
		statestore.ErrConflict: 409, statestore.ErrNoEligibleWorker: 503, statestore.ErrUnavailable: 503,
		&statestore.NoEligibleError{Pool: "p"}: 503, context.DeadlineExceeded: 503, context.Canceled: 500,
		&statestore.LayoutMismatchError{Pool: "p", Found: "1", Want: "2"}: 409} {
		if got := Status(err); got != want {
			t.Errorf("Status(%v) = %d, want %d", err, got, want)
		}
	}
	// A pool of another key layout (SPEC §8): 409 layout_mismatch naming both versions and the fix.
	r := (&API{}).fromError(fmt.Errorf("route: %w", &statestore.LayoutMismatchError{Pool: "p", Found: "1", Want: "2"}))
	if r.Status != 409 || !strings.Contains(string(r.Body), `"code":"layout_mismatch"`) || !strings.Contains(string(r.Body), "pool migrate p") {
		t.Errorf("layout mismatch: %d %s", r.Status, r.Body)
	}
}

func TestTokenList(t *testing.T) {
	for in, want := range map[string]string{
		`[]`: "[]", `null`: "[]", `[0]`: "[0]", ` [ 1 , 2,3 ] `: "[1 2 3]", `[4294967295]`: "[4294967295]",
	} {
		var l tokenList
		if err := l.UnmarshalJSON([]byte(in)); err != nil || fmt.Sprint([]uint32(l)) != want {
			t.Errorf("%s: %v %v", in, []uint32(l), err)
		}
	}
	for _, in := range []string{`[4294967296]`, `[-1]`, `[1.0]`, `[1e3]`, `[01]`, `["1"]`, `[true]`, `"1,2"`, `{}`, `[1 2]`, `[99999999999999999999999]`} {
		var l tokenList
		if err := l.UnmarshalJSON([]byte(in)); err == nil {
			t.Errorf("%s accepted as %v", in, []uint32(l))
		}
	}
	// Through the decoder, the other fields still decode strictly.
	var b routeBody
	if err := decodeStrict([]byte(`{"pool":"p","token_ids":[5,6],"isl":9}`), "x", &b); err != nil {
		t.Fatal(err)
	}
	if in, err := b.input(); err != nil || in.Pool != "p" || len(in.TokenIDs) != 2 || *in.ISL != 9 {
		t.Fatalf("%+v %v", in, err)
	}
	if err := decodeStrict([]byte(`{"token_ids":[5],"bogus":1}`), "x", &b); err == nil {
		t.Fatal("unknown field accepted")
	}
}

// TestWorkerHealthListing: the shared health (SPEC §7.2) shows in GET /v1/workers, explain names the
// "unhealthy" and "excluded" filter reasons, and a pool whose every worker is unhealthy answers 503
// naming the reason. The health knobs are ordinary pool knobs of PUT /v1/pools.
func TestWorkerHealthListing(t *testing.T) {
	a := newTestAPI(t)
	ctx := context.Background()
	if r := do(a, "PUT", "/v1/pools/default", `{"block_size":4,"unhealthy_after":2,"unhealthy_backoff_ms":3600000}`, nil); r.Status != 200 {
		t.Fatalf("put pool: %d %s", r.Status, r.Body)
	}
	if r := do(a, "PUT", "/v1/pools/default", `{"block_size":4,"unhealthy_backoff_ms":0}`, nil); r.Status != 400 || !strings.Contains(string(r.Body), "unhealthy_backoff_ms") {
		t.Fatalf("back-off 0: %d %s", r.Status, r.Body)
	}
	for i := 0; i < 2; i++ { // what the gateway does after two failed forwards to w0
		if _, err := a.rt.ReportForward(ctx, "", "w0", false); err != nil {
			t.Fatal(err)
		}
	}
	r := do(a, "GET", "/v1/workers", "", nil)
	var list struct {
		Workers []statestore.WorkerInfo `json:"workers"`
	}
	if r.Status != 200 || json.Unmarshal(r.Body, &list) != nil || len(list.Workers) != 2 {
		t.Fatalf("workers: %d %s", r.Status, r.Body)
	}
	if h := list.Workers[0].Health; list.Workers[0].WorkerID != "w0" || h.State != "unhealthy" || h.ConsecutiveFailures != 2 ||
		h.BackoffMs != 3600000 || h.UnhealthyUntilMs == 0 {
		t.Fatalf("w0 health: %s", r.Body)
	}
	if !strings.Contains(string(r.Body), `"health":{"consecutive_failures":0,"state":"healthy"}`) {
		t.Fatalf("w1 health: %s", r.Body)
	}
	r = do(a, "POST", "/v1/route/explain", `{"token_ids":[1,2,3,4],"excluded_workers":["w1"]}`, nil)
	if r.Status != 200 || !strings.Contains(string(r.Body), `"filtered":"unhealthy"`) || !strings.Contains(string(r.Body), `"filtered":"excluded"`) {
		t.Fatalf("explain: %d %s", r.Status, r.Body)
	}
	r = do(a, "POST", "/v1/route", `{"token_ids":[1,2,3,4],"excluded_workers":["w1"]}`, nil)
	if r.Status != 503 || !strings.Contains(string(r.Body), "1 excluded, 1 unhealthy") {
		t.Fatalf("route with nothing eligible: %d %s", r.Status, r.Body)
	}
	if r = do(a, "POST", "/v1/route", `{"token_ids":[1,2,3,4]}`, nil); r.Status != 200 || !strings.Contains(string(r.Body), `"worker_id":"w1"`) {
		t.Fatalf("route: %d %s", r.Status, r.Body)
	}
}

// TestRouteMMItems: mm_items make the blocks an image covers its own. Worker w1 caches a 2-block prompt
// with image 5 in block 1 (local hashes as the ingest folds them); the same tokens with image 5 match
// both blocks, with image 6 only the text block.
func TestRouteMMItems(t *testing.T) {
	a := newTestAPI(t)
	toks := []uint32{1, 2, 3, 4, 9, 9, 9, 9}
	local := blockhash.LocalHashesMM(nil, toks, 4, blockhash.Seed, []blockhash.MMItem{{Hash: 5, Offset: 4, Length: 4}})
	ev := fmt.Sprintf(`{"worker_id":"w1","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":10,"tokens_hash":%d},{"block_hash":11,"tokens_hash":%d}]}}}}`, local[0], local[1])
	if r := do(a, "POST", "/v1/events", ev, nil); r.Status != 200 {
		t.Fatalf("events: %d %s", r.Status, r.Body)
	}
	for image, want := range map[int]int{5: 2, 6: 1} {
		body := fmt.Sprintf(`{"token_ids":[1,2,3,4,9,9,9,9],"mm_items":[{"hash":%d,"offset":4,"length":4}],"pinned_worker":"w1"}`, image)
		r := do(a, "POST", "/v1/route/explain", body, nil)
		var ex statestore.Explanation
		if r.Status != 200 || json.Unmarshal(r.Body, &ex) != nil {
			t.Fatalf("explain: %d %s", r.Status, r.Body)
		}
		if got := ex.Decision.OverlapBlocks; got != want {
			t.Errorf("image %d: overlap %d on w1, want %d", image, got, want)
		}
	}
}
