package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

func tokens(from, n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(from + i)
	}
	return "[" + strings.Join(s, ",") + "]"
}

// serveScenario is a replay file (SPEC §7.1) without advance_ms or query lines: every line maps to one
// HTTP call (consecutive events to one POST /v1/events), so its decisions over HTTP must equal the replay's.
func serveScenario() []string {
	stored := func(w string, id int, parent string, toks string, hashes string, rank int) string {
		return fmt.Sprintf(`{"event":{"worker_id":%q,"event":{"event_id":%d,"dp_rank":%d,"data":{"stored":{"parent_hash":%s,"token_ids":%s,"block_size":4,"blocks":%s}}}}}`,
			w, id, rank, parent, toks, hashes)
	}
	return []string{
		`{"config":{"block_size":4,"decode_active_request_weight":1}}`,
		`{"worker":{"worker_id":"w0","url":"http://w0:8000","max_num_batched_tokens":64}}`,
		`{"worker":{"worker_id":"w1","url":"http://w1:8000"}}`,
		`{"worker":{"worker_id":"w2","url":"http://w2:8000","dp_size":2}}`,
		stored("w0", 1, "null", tokens(1, 8), `[{"block_hash":11},{"block_hash":12}]`, 0),
		stored("w0", 2, "12", tokens(9, 8), `[{"block_hash":13},{"block_hash":14}]`, 0),
		stored("w1", 1, "null", tokens(1, 8), `[{"block_hash":21},{"block_hash":22}]`, 0),
		`{"event":{"worker_id":"w2","storage_tier":"host_pinned","event":{"event_id":1,"dp_rank":1,"data":{"stored":{"parent_hash":null,"blocks":[{"block_hash":31,"tokens_hash":7}]}}}}}`,
		stored("w2", 2, "31", tokens(104, 4), `[{"block_hash":32}]`, 1),
		`{"route":{"request_id":"r1","token_ids":` + tokens(1, 16) + `},"random":0}`,
		`{"route":{"request_id":"r2","token_ids":` + tokens(1, 16) + `},"random":0}`,
		`{"explain":{"request_id":"e1","token_ids":` + tokens(1, 12) + `},"random":0.5}`,
		`{"prefill_done":"r1"}`,
		`{"route":{"request_id":"r3","local_hashes":[7,1,2],"isl":13},"random":0.7}`,
		`{"done":"r1"}`,
		`{"done":"r2"}`,
		`{"route":{"request_id":"r4","token_ids":` + tokens(1, 20) + `,"config":{"temperature":0.5}},"random":0.3}`,
		`{"event":{"worker_id":"w0","event":{"event_id":3,"data":{"removed":{"block_hashes":[13]}}}}}`,
		`{"event":{"worker_id":"w1","event":{"event_id":2,"data":"cleared"}}}`,
		`{"route":{"request_id":"r5","token_ids":` + tokens(1, 16) + `},"random":0.99}`,
		`{"remove_worker":"w1"}`,
		`{"route":{"request_id":"r6","pinned_worker":"w1","token_ids":` + tokens(1, 8) + `},"random":0}`,
		`{"route":{"request_id":"r7","token_ids":` + tokens(1, 8) + `,"allowed_workers":["w1","w2"]},"random":0.9}`,
		`{"explain":{"request_id":"e2","token_ids":` + tokens(1, 8) + `},"random":0.1}`,
	}
}

// runOverHTTP plays the scenario against a server and returns one normalised JSON value per
// route/explain line, in the replay's printed shape.
func runOverHTTP(t *testing.T, p *serveProc, lines []string) []any {
	t.Helper()
	var out []any
	var pending []string // raw RouterEvent JSON
	batch := 0
	flush := func() {
		if len(pending) == 0 {
			return
		}
		var body string
		if batch%2 == 0 {
			body = "[" + strings.Join(pending, ",") + "]"
		} else {
			body = strings.Join(pending, "\n") + "\n"
		}
		batch++
		b := p.must(t, 200, "POST", "/v1/events", body)
		var r struct {
			Invalid int `json:"invalid"`
		}
		if json.Unmarshal(b, &r) != nil || r.Invalid != 0 {
			t.Fatalf("events rejected: %s", b)
		}
		pending = nil
	}
	for _, line := range lines {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &obj); err != nil {
			t.Fatalf("scenario line %s: %v", line, err)
		}
		if ev, ok := obj["event"]; ok {
			pending = append(pending, string(ev))
			continue
		}
		flush()
		switch {
		case obj["config"] != nil:
			p.must(t, 200, "PUT", "/v1/pools/default", string(obj["config"]))
		case obj["worker"] != nil:
			var w struct {
				ID string `json:"worker_id"`
			}
			json.Unmarshal(obj["worker"], &w)
			p.must(t, 200, "PUT", "/v1/workers/"+w.ID, string(obj["worker"]))
		case obj["remove_worker"] != nil:
			var id string
			json.Unmarshal(obj["remove_worker"], &id)
			p.must(t, 200, "DELETE", "/v1/workers/"+id, "")
		case obj["prefill_done"] != nil, obj["done"] != nil:
			what, raw := "done", obj["done"]
			if raw == nil {
				what, raw = "prefill_done", obj["prefill_done"]
			}
			var id string
			json.Unmarshal(raw, &id)
			p.must(t, 200, "POST", "/v1/requests/"+id+"/"+what, "")
		case obj["route"] != nil, obj["explain"] != nil:
			path, raw := "/v1/route", obj["route"]
			if raw == nil {
				path, raw = "/v1/route/explain", obj["explain"]
			}
			var body map[string]any
			d := json.NewDecoder(bytes.NewReader(raw))
			d.UseNumber()
			d.Decode(&body)
			body["random"] = json.Number(string(obj["random"]))
			b, _ := json.Marshal(body)
			st, resp, err := p.do("POST", path, string(b))
			if err != nil {
				t.Fatal(err)
			}
			var v any
			switch {
			case st != 200:
				var e struct {
					Error statestore.ErrorBody `json:"error"`
				}
				if json.Unmarshal(resp, &e) != nil || e.Error.Code == "" {
					t.Fatalf("%s: status %d without a JSON error: %s", path, st, resp)
				}
				v = map[string]any{"request_id": body["request_id"], "error": e.Error}
			case path == "/v1/route":
				v = decodeDecision(t, resp)
			default:
				var ex statestore.Explanation
				if err := json.Unmarshal(resp, &ex); err != nil {
					t.Fatalf("explain: %v: %s", err, resp)
				}
				v = ex
			}
			out = append(out, normalise(t, v))
		default:
			t.Fatalf("scenario line not mapped to HTTP: %s", line)
		}
	}
	flush()
	return out
}

// normalise re-encodes a value through JSON so that values of different Go types compare.
func normalise(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	json.Unmarshal(b, &out)
	return out
}

// replayOutput runs the scenario through core.Replay (what `kvrouter replay` prints) on a memory store.
func replayOutput(t *testing.T, lines []string) []any {
	t.Helper()
	var buf bytes.Buffer
	if err := core.Replay(context.Background(), statestore.NewMemory(), strings.NewReader(strings.Join(lines, "\n")+"\n"), &buf); err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var v any
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatalf("replay line %q: %v", l, err)
		}
		if m, ok := v.(map[string]any); ok && m["line"] != nil {
			t.Fatalf("replay rejected a scenario line: %s", l)
		}
		out = append(out, v)
	}
	return out
}

func compareWithReplay(t *testing.T, p *serveProc) {
	t.Helper()
	lines := serveScenario()
	want := replayOutput(t, lines)
	got := runOverHTTP(t, p, lines)
	if len(got) != len(want) {
		t.Fatalf("%d answers over HTTP, %d replay lines", len(got), len(want))
	}
	workers := map[string]bool{}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			g, _ := json.Marshal(got[i])
			w, _ := json.Marshal(want[i])
			t.Errorf("answer %d differs\n http:   %s\n replay: %s", i, g, w)
		}
		if m, ok := want[i].(map[string]any); ok && m["worker_id"] != nil {
			workers[fmt.Sprint(m["worker_id"])] = true
		}
	}
	if len(workers) < 2 {
		t.Errorf("scenario too weak: decisions only ever chose %v", workers)
	}
}

// TestServeEndToEndMemory: real `kvrouter serve` process, memory store, real sockets; decisions equal
// the replay's.
func TestServeEndToEndMemory(t *testing.T) {
	requireIntegration(t)
	p := startServe(t, "--log-level", "debug")
	compareWithReplay(t, p)
	b := p.must(t, 200, "GET", "/v1/workers", "")
	if !strings.Contains(string(b), `"worker_id":"w2"`) || strings.Contains(string(b), `"worker_id":"w1"`) {
		t.Errorf("workers: %s", b)
	}
	p.must(t, 200, "GET", "/healthz", "")
	metrics := string(p.must(t, 200, "GET", "/metrics", ""))
	for _, m := range []string{`kvrouter_decisions_total{kind="route",outcome="ok",pool="default"}`,
		`kvrouter_decisions_total{kind="route",outcome="no_eligible_worker",pool="default"} 1`,
		`kvrouter_decision_duration_seconds_count{kind="route",phase="store"}`,
		`kvrouter_decision_duration_seconds_count{kind="route",phase="hash"}`,
		`kvrouter_decision_overlap_ratio_bucket`, `kvrouter_events_applied_total{status="applied"}`,
		`kvrouter_events_received_total{type="stored"}`, `kvrouter_events_received_total{type="cleared"} 1`,
		`kvrouter_worker_active_requests{pool="default",worker="w2"}`, `kvrouter_store_call_duration_seconds_count{op="route"}`,
		`kvrouter_http_requests_total{code="200",endpoint="/v1/route"}`} {
		if !strings.Contains(metrics, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	if !strings.Contains(p.log(), "msg=decision kind=route") {
		t.Errorf("no debug decision log line")
	}
}

// startRedisServe starts serve on a real Redis.
func startRedisServe(t *testing.T, url string, args ...string) *serveProc {
	t.Helper()
	return startServe(t, append([]string{"--store", url}, args...)...)
}

func TestServeEndToEndRedis(t *testing.T) {
	requireIntegration(t)
	r := testredis.Start(t)
	p := startRedisServe(t, r.URL())
	compareWithReplay(t, p)
}

// TestServeTwoProcessesOneRedis: two routers on one Redis share sessions and loads.
func TestServeTwoProcessesOneRedis(t *testing.T) {
	requireIntegration(t)
	r := testredis.Start(t)
	a := startRedisServe(t, r.URL())
	b := startRedisServe(t, r.URL())
	a.must(t, 200, "PUT", "/v1/pools/default", `{"block_size":4,"session_affinity_ttl_ms":600000}`)
	for _, w := range []string{"w0", "w1", "w2"} {
		a.must(t, 200, "PUT", "/v1/workers/"+w, `{"url":"http://`+w+`"}`)
	}
	// B sees the workers registered through A.
	if ws := string(b.must(t, 200, "GET", "/v1/workers", "")); !strings.Contains(ws, `"w2"`) {
		t.Fatalf("B does not see A's workers: %s", ws)
	}
	// Session bound through A (random 0.99 → the last tied worker, w2), honoured by B with random 0.
	d1 := decodeDecision(t, a.must(t, 200, "POST", "/v1/route", `{"request_id":"s1","token_ids":`+tokens(1, 8)+`,"random":0.99}`, "X-Session-ID", "chat-7"))
	d2 := decodeDecision(t, b.must(t, 200, "POST", "/v1/route", `{"request_id":"s2","token_ids":`+tokens(1, 8)+`,"random":0}`, "X-Session-ID", "chat-7"))
	if d2.WorkerID != d1.WorkerID {
		t.Errorf("session bound to %s through A, B routed it to %s", d1.WorkerID, d2.WorkerID)
	}
	// Loads booked through A are seen by B: pin a big request on w0 through A...
	a.must(t, 200, "POST", "/v1/route", `{"request_id":"big","pinned_worker":"w0","token_ids":`+tokens(1, 400)+`}`)
	var ws struct {
		Workers []statestore.WorkerInfo `json:"workers"`
	}
	json.Unmarshal(b.must(t, 200, "GET", "/v1/workers", ""), &ws)
	for _, w := range ws.Workers {
		if w.WorkerID == "w0" && (len(w.Ranks) == 0 || w.Ranks[0].ActivePrefillTokens < 400) {
			t.Errorf("B sees w0 loads %+v, want >= 400 prefill tokens booked through A", w.Ranks)
		}
	}
	// ...so B's decisions avoid w0, and ending the request through B frees it for A.
	for i := 0; i < 3; i++ {
		d := decodeDecision(t, b.must(t, 200, "POST", "/v1/route", fmt.Sprintf(`{"request_id":"x%d","token_ids":%s,"random":0}`, i, tokens(1000, 8))))
		if d.WorkerID == "w0" {
			t.Errorf("B routed to w0 although A booked 400 tokens on it: %+v", d)
		}
		b.must(t, 200, "POST", fmt.Sprintf("/v1/requests/x%d/done", i), "")
	}
	ack := b.must(t, 200, "POST", "/v1/requests/big/done", "")
	if !strings.Contains(string(ack), `"found":true`) {
		t.Errorf("B could not end A's request: %s", ack)
	}
	ex := a.must(t, 200, "POST", "/v1/route/explain", `{"token_ids":`+tokens(1000, 8)+`}`)
	if !strings.Contains(string(ex), `"worker_id":"w0","dp_rank":0,"device_blocks":0,"host_blocks":0,"disk_blocks":0,"event_blocks":0,"predicted_blocks":0,"overlap_blocks":0,"credit":0,"active_prefill_tokens":0`) {
		t.Errorf("A still sees load on w0 after B ended it: %s", ex)
	}
}

// TestServeBadInput: malformed and hostile requests over real sockets get 4xx JSON errors, and the
// server keeps serving.
func TestServeBadInput(t *testing.T) {
	requireIntegration(t)
	p := startServe(t, "--block-size", "4", "--max-body-bytes", "1048576")
	p.must(t, 200, "PUT", "/v1/workers/w0", `{"url":"u"}`)
	huge := `{"token_ids":[` + strings.Repeat("1,", 600000) + `1]}`
	cases := []struct {
		method, path, body string
		status             int
		want               string
	}{
		{"POST", "/v1/route", `{"token_ids":[1,2`, 400, "malformed JSON"},
		{"POST", "/v1/route", `{"token_ids":"1,2"}`, 400, "must be an array"},
		{"POST", "/v1/route", `{"token_ids":[1],"colour":"red"}`, 400, "unknown field"},
		{"POST", "/v1/route", `{"isl":1e99}`, 400, "isl"},
		{"POST", "/v1/route", `{"token_ids":[99999999999]}`, 400, "token id"},
		{"POST", "/v1/route", `{"config":{"temperature":NaN}}`, 400, "malformed JSON"},
		{"POST", "/v1/route", `{"config":{"temperature":"NaN"}}`, 400, "temperature"},
		{"POST", "/v1/route", `{"config":{"prefill_load_scale":-3}}`, 400, "prefill_load_scale"},
		{"POST", "/v1/route", `{"pool":"gpt-9"}`, 404, "unknown pool"},
		{"POST", "/v1/route", `{"pinned_worker":"nobody","token_ids":[1]}`, 503, "no eligible worker"},
		{"POST", "/v1/route", huge, 413, "larger than"},
		{"POST", "/v1/events", `[{"worker_id":"w0","event":{"data":{"stored":{"blocks":[{"block_hash":"x"}]}}}}]`, 400, "64-bit"},
		{"POST", "/v1/events", "{\"worker_id\":\"w0\"\n", 400, "line 1"},
		{"PUT", "/v1/pools/default", `{"temperature":1e400}`, 400, "temperature"},
		{"PUT", "/v1/pools/default", `{"lease_ttl_ms":-1}`, 400, "lease_ttl_ms"},
		{"PUT", "/v1/workers/w9?pool=nope", `{"url":"u"}`, 404, "unknown pool"},
		{"DELETE", "/v1/workers/ghost", ``, 404, "unknown worker"},
		{"PATCH", "/v1/route", `{}`, 405, "not allowed"},
		{"GET", "/v1/nothing", ``, 404, "no such endpoint"},
	}
	for _, c := range cases {
		var hdr []string
		if len(c.body) > 1<<20 {
			hdr = []string{"Expect", "100-continue"}
		}
		st, b, err := p.do(c.method, c.path, c.body, hdr...)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		var e struct {
			Error statestore.ErrorBody `json:"error"`
		}
		if st != c.status || json.Unmarshal(b, &e) != nil || e.Error.Code == "" || !strings.Contains(e.Error.Message, c.want) {
			t.Errorf("%s %s %.60s: %d %.300s; want %d with %q", c.method, c.path, c.body, st, b, c.status, c.want)
		}
	}
	d := decodeDecision(t, p.must(t, 200, "POST", "/v1/route", `{"token_ids":[1,2,3,4]}`))
	if d.WorkerID != "w0" {
		t.Errorf("after bad input: %+v", d)
	}
	if strings.Contains(p.log(), "panic") {
		t.Errorf("server log mentions a panic:\n%s", p.log())
	}
}

// TestServeConfig: YAML file, env and flags with precedence flags > env > file; bad settings fail at
// startup naming the setting.
func TestServeConfig(t *testing.T) {
	requireIntegration(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kvrouter.yaml")
	os.WriteFile(cfg, []byte("log_level: debug\npools:\n  default:\n    block_size: 8\n    temperature: 0.25\n  chat:\n    preset: agentic\n    block_size: 32\n"), 0o644)
	t.Setenv("KVROUTER_TEMPERATURE", "0.5") // env beats the file
	p := startServe(t, "--config", cfg, "--lease-ttl-ms", "60000")
	var pools struct {
		Pools []statestore.PoolInfo `json:"pools"`
	}
	json.Unmarshal(p.must(t, 200, "GET", "/v1/pools", ""), &pools)
	got := map[string]statestore.PoolConfig{}
	for _, pi := range pools.Pools {
		got[pi.Name] = pi.Config
	}
	// serveEnv strips KVROUTER_* for the child, so the env value must not have reached it.
	if c := got["default"]; c.BlockSize != 8 || c.Temperature != 0.25 || c.LeaseTTLMs != 60000 {
		t.Errorf("default pool %+v", c)
	}
	if c := got["chat"]; c.BlockSize != 32 || c.OverlapScoreCredit != 2 || c.PrefillLoadScale != 4 || c.DecodeActiveRequestWeight != 64 {
		t.Errorf("chat pool %+v", c)
	}
	bin := kvrouterBinary(t)
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--temperature", "NaN"}, "", "--temperature"},
		{[]string{"--block-size", "0"}, "", "block_size"},
		{[]string{"--max-body-bytes", "1"}, "", "max-body-bytes"},
		{nil, "KVROUTER_LOG_LEVEL=loud", "log-level"},
		{nil, "KVROUTER_SHUTDOWN_TIMEOUT=soon", "KVROUTER_SHUTDOWN_TIMEOUT"},
		{[]string{"--config", cfg + ".missing"}, "", "--config"},
		{[]string{"--load-aware", "--agentic"}, "", "--load-aware"},
		{[]string{"--store", "mongodb://x"}, "", "mongodb"},
	} {
		cmd := exec.Command(bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, c.args...)...)
		cmd.Env = serveEnv()
		if c.env != "" {
			cmd.Env = append(cmd.Env, c.env)
		}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("serve %v %s: err %v, output %q; want a failure naming %q", c.args, c.env, err, out, c.want)
		}
	}
	// Env (not stripped here) beats the file.
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--config", cfg, "--log-level", "warn")
	cmd.Env = append(serveEnv(), "KVROUTER_TEMPERATURE=NaN")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "--temperature") {
		t.Errorf("KVROUTER_TEMPERATURE=NaN was not applied over the file: %v %s", err, out)
	}
}
