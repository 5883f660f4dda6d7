package api

import (
	"context"
	"encoding/json"
	"testing"
)

// fuzzEndpoint feeds arbitrary bodies to one endpoint: the answer must be well-formed JSON, never a 500
// or a panic, and the API must keep answering.
func fuzzEndpoint(f *testing.F, method, path string, seeds []string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	a := newTestAPI(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := a.Do(context.Background(), Request{Method: method, RawPath: path, Body: body,
			Query: func(string) string { return "" }, Header: func(string) string { return "" }})
		if r.Status >= 500 && r.Status != 503 {
			t.Fatalf("status %d for %q: %s", r.Status, body, r.Body)
		}
		if !json.Valid(r.Body) {
			t.Fatalf("invalid JSON answer for %q: %s", body, r.Body)
		}
		if r.Status >= 400 {
			var env errorEnvelope
			if json.Unmarshal(r.Body, &env) != nil || env.Error.Code == "" || env.Error.Message == "" {
				t.Fatalf("error without code/message for %q: %s", body, r.Body)
			}
		}
	})
}

func FuzzRoute(f *testing.F) {
	fuzzEndpoint(f, "POST", "/v1/route", []string{`{"token_ids":[1,2,3,4,5,6,7,8]}`, `{"local_hashes":[1,2],"isl":9}`,
		`{"config":{"temperature":0.5},"random":0.3}`, `{"session_id":"s","allowed_workers":["w0"]}`, `{"pinned_worker":"w1"}`,
		`{"local_hashes":[-1,18446744073709551615]}`, `{"isl":-1}`, `{"config":{"overlap_score_credit":1e9}}`})
}

func FuzzExplain(f *testing.F) {
	fuzzEndpoint(f, "POST", "/v1/route/explain", []string{`{"token_ids":[1,2,3,4]}`, `{"allowed_workers":[]}`})
}

func FuzzEvents(f *testing.F) {
	fuzzEndpoint(f, "POST", "/v1/events", []string{
		`[{"worker_id":"w0","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":2,"tokens_hash":3}]}}}}]`,
		`{"worker_id":1,"storage_tier":"host","event":{"event_id":2,"epoch":"e","data":{"removed":{"block_hashes":[2]}}}}` + "\n" + `{"worker_id":"w1","event":{"data":"cleared"}}`,
		`[{"worker_id":"w0","event":{"data":{"stored":{"parent_hash":2,"token_ids":[1,2,3,4,5],"block_size":4,"blocks":[{"block_hash":9}]}}}}]`,
	})
}

func FuzzWorker(f *testing.F) {
	fuzzEndpoint(f, "PUT", "/v1/workers/wf", []string{`{"url":"http://x","dp_size":2,"total_kv_blocks":100,"max_num_batched_tokens":8192,"kv_events":false}`, `{"url":"u","block_size":4}`})
}

func FuzzPool(f *testing.F) {
	fuzzEndpoint(f, "PUT", "/v1/pools/pf", []string{`{"block_size":16,"temperature":0.2,"session_affinity_ttl_ms":1000}`, `{"block_size":0}`})
}
