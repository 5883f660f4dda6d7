package api

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// fuzzStartMs is the fuzz API's clock at the first input, ms (any fixed instant: leases, sessions and
// predicted entries are measured from it).
const fuzzStartMs = 1_700_000_000_000

// fuzzAPI is an API over the memory store whose clock moves 1 ms per input and stands still within
// one, so that two snapshots around a request differ only by what the request did.
type fuzzAPI struct {
	*API
	now atomic.Int64 // ms
}

// newFuzzAPI returns an API with state worth protecting: pool "default" (block size 4) with workers w0
// and w1, w1 holding a 4-block chain from events (event id 1), and one live lease (request "held",
// routed to w1 by its prefix).
func newFuzzAPI(t testing.TB) *fuzzAPI {
	t.Helper()
	f := &fuzzAPI{}
	f.now.Store(fuzzStartMs)
	m := NewMetrics(prometheus.NewRegistry())
	rt := core.New(InstrumentStore(statestore.NewMemory(), m), core.Options{PoolCacheTTL: -1, Now: f.now.Load})
	if err := rt.PutPool(context.Background(), "default", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	f.API = New(rt, Options{Metrics: m})
	for _, s := range []struct{ method, path, body string }{
		{"PUT", "/v1/workers/w0", `{"url":"http://w0"}`},
		{"PUT", "/v1/workers/w1", `{"url":"http://w1"}`},
		{"POST", "/v1/events", `[{"worker_id":"w1","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16],"block_size":4,"blocks":[{"block_hash":11},{"block_hash":12},{"block_hash":13},{"block_hash":14}]}}}}]`},
		{"POST", "/v1/route", `{"request_id":"held","token_ids":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}`},
	} {
		if r := f.do(s.method, s.path, []byte(s.body)); r.Status != 200 {
			t.Fatalf("%s %s: %d %s", s.method, s.path, r.Status, r.Body)
		}
	}
	return f
}

func (f *fuzzAPI) do(method, path string, body []byte, query ...string) Response {
	q := map[string]string{}
	for i := 0; i+1 < len(query); i += 2 {
		q[query[i]] = query[i+1]
	}
	return f.Do(context.Background(), Request{Method: method, RawPath: path, Body: body,
		Query: func(k string) string { return q[k] }, Header: func(string) string { return "" }})
}

// snapshot is the state a client can read: every pool's config and every pool's workers with their
// loads per rank, cached blocks, event ids, epochs, liveness and health — as JSON.
func (f *fuzzAPI) snapshot(t *testing.T) []byte {
	t.Helper()
	get := func(path string, query ...string) json.RawMessage {
		r := f.do("GET", path, nil, query...)
		if r.Status != 200 {
			t.Fatalf("GET %s %v: %d %s", path, query, r.Status, r.Body)
		}
		return r.Body
	}
	pools := get("/v1/pools")
	var list struct {
		Pools []statestore.PoolInfo `json:"pools"`
	}
	if err := json.Unmarshal(pools, &list); err != nil {
		t.Fatalf("GET /v1/pools: %v: %s", err, pools)
	}
	snap := []json.RawMessage{pools}
	for _, p := range list.Pools {
		snap = append(snap, get("/v1/pools/"+p.Name), get("/v1/workers", "pool", p.Name))
	}
	b, _ := json.Marshal(snap)
	return b
}

// fuzzEndpoint feeds arbitrary bodies to one endpoint: the answer must be well-formed JSON, never a 500
// or a panic, an error has a code and a message, and a rejected request (any 4xx or 503) leaves every
// pool, worker, load and index counter as it was.
func fuzzEndpoint(f *testing.F, method, path string, seeds []string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	a := newFuzzAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		a.now.Add(1)
		before := a.snapshot(t)
		r := a.do(method, path, body)
		if r.Status >= 500 && r.Status != 503 {
			t.Fatalf("status %d for %q: %s", r.Status, body, r.Body)
		}
		if !json.Valid(r.Body) {
			t.Fatalf("invalid JSON answer for %q: %s", body, r.Body)
		}
		if r.Status < 400 {
			return
		}
		var env errorEnvelope
		if json.Unmarshal(r.Body, &env) != nil || env.Error.Code == "" || env.Error.Message == "" {
			t.Fatalf("error without code/message for %q: %s", body, r.Body)
		}
		if after := a.snapshot(t); !bytes.Equal(before, after) {
			t.Fatalf("%s %s %q was rejected (%d %s) but changed the state:\nbefore %s\nafter  %s", method, path, body, r.Status, r.Body, before, after)
		}
	})
}

func FuzzRoute(f *testing.F) {
	fuzzEndpoint(f, "POST", "/v1/route", []string{`{"token_ids":[1,2,3,4,5,6,7,8]}`, `{"local_hashes":[1,2],"isl":9}`,
		`{"config":{"temperature":0.5},"random":0.3}`, `{"session_id":"s","allowed_workers":["w0"]}`, `{"pinned_worker":"w1"}`,
		`{"local_hashes":[-1,18446744073709551615]}`, `{"isl":-1}`, `{"config":{"overlap_score_credit":1e9}}`,
		`{"request_id":"held","token_ids":[1,2,3,4]}`, `{"pinned_worker":"nobody","token_ids":[1,2,3,4]}`, `{"pool":"nopool"}`})
}

func FuzzExplain(f *testing.F) {
	fuzzEndpoint(f, "POST", "/v1/route/explain", []string{`{"token_ids":[1,2,3,4]}`, `{"allowed_workers":[]}`})
}

func FuzzEvents(f *testing.F) {
	fuzzEndpoint(f, "POST", "/v1/events", []string{
		`[{"worker_id":"w0","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":2,"tokens_hash":3}]}}}}]`,
		`{"worker_id":1,"storage_tier":"host","event":{"event_id":2,"epoch":"e","data":{"removed":{"block_hashes":[2]}}}}` + "\n" + `{"worker_id":"w1","event":{"data":"cleared"}}`,
		`[{"worker_id":"w0","event":{"data":{"stored":{"parent_hash":2,"token_ids":[1,2,3,4,5],"block_size":4,"blocks":[{"block_hash":9}]}}}}]`,
		// A valid event in a truncated batch: the body is rejected as a whole, w1's blocks stay.
		`[{"worker_id":"w1","event":{"event_id":2,"data":"cleared"}},{"worker_id":"w1"`,
		`{"worker_id":"w1","event":{"event_id":2,"data":"cleared"}}` + "\n" + `{"worker_id":`,
		// An invalid event is reported and skipped (200); the valid one before it applies.
		`[{"worker_id":"w1","event":{"event_id":2,"data":"cleared"}},{"worker_id":"w1","event":{"event_id":3,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":"x"}]}}}}]`,
	})
}

func FuzzWorker(f *testing.F) {
	fuzzEndpoint(f, "PUT", "/v1/workers/wf", []string{`{"url":"http://x","dp_size":2,"total_kv_blocks":100,"max_num_batched_tokens":8192,"kv_events":false}`, `{"url":"u","block_size":4}`,
		`{"url":"u","worker_id":"w0"}`})
}

func FuzzPool(f *testing.F) {
	fuzzEndpoint(f, "PUT", "/v1/pools/pf", []string{`{"block_size":16,"temperature":0.2,"session_affinity_ttl_ms":1000}`, `{"block_size":0}`,
		`{"block_size":4,"busy_threshold":-1}`})
}
