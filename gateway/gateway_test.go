package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/internal/testnet"
	"github.com/kvrouter/kvrouter/statestore"
)

// Tests of the gateway core over the embedded store, with engines that are real HTTP servers on loopback
// sockets. No timing assertions: every wait is for a condition, with a generous deadline.

const testPool, testModel = "p", "m"

// countingStore counts lease renewals.
type countingStore struct {
	statestore.Store
	renewals atomic.Int64
}

func (c *countingStore) RenewLease(ctx context.Context, pool, id string, nowMs int64) (bool, error) {
	c.renewals.Add(1)
	return c.Store.RenewLease(ctx, pool, id, nowMs)
}

type fixture struct {
	t     *testing.T
	st    *countingStore
	rt    *core.Router
	gw    *gateway.Gateway
	nextW int
}

func newFixture(t *testing.T, leaseTTLMs int64, opts gateway.Options) *fixture {
	t.Helper()
	st := &countingStore{Store: statestore.NewMemory()}
	rt := core.New(st, core.Options{})
	cfg := statestore.DefaultPoolConfig(4)
	cfg.Models = []string{testModel, "other-name"}
	if leaseTTLMs > 0 {
		cfg.LeaseTTLMs = leaseTTLMs
	}
	if err := rt.PutPool(context.Background(), testPool, cfg); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(rt, opts)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, st: st, rt: rt, gw: gw}
}

// addWorker registers a worker at url and returns its id.
func (f *fixture) addWorker(url string) string {
	f.t.Helper()
	f.nextW++
	id := fmt.Sprintf("w%d", f.nextW)
	if err := f.rt.PutWorker(context.Background(), testPool, statestore.WorkerSpec{WorkerID: id, URL: url}, 0); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// engine starts a real HTTP server running h and registers it as a worker.
func (f *fixture) engine(h http.HandlerFunc) (string, *httptest.Server) {
	srv := httptest.NewServer(h)
	f.t.Cleanup(srv.Close)
	return f.addWorker(srv.URL), srv
}

// load returns a worker's active requests and prefill tokens.
func (f *fixture) load(worker string) (reqs, prefill int64) {
	f.t.Helper()
	ws, err := f.rt.Workers(context.Background(), testPool)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, w := range ws {
		if w.WorkerID == worker {
			for _, r := range w.Ranks {
				reqs += r.ActiveRequests
				prefill += r.ActivePrefillTokens
			}
		}
	}
	return
}

// requireIdle fails unless no worker holds load.
func (f *fixture) requireIdle() {
	f.t.Helper()
	for i := 1; i <= f.nextW; i++ {
		w := fmt.Sprintf("w%d", i)
		if r, p := f.load(w); r != 0 || p != 0 {
			f.t.Fatalf("%s still holds load: %d requests, %d prefill tokens", w, r, p)
		}
	}
}

// sink records an answer; failAt > 0 makes the failAt-th Write fail (the client left).
type sink struct {
	mu     sync.Mutex
	status int
	header http.Header
	chunks [][]byte
	failAt int
	wrote  chan struct{} // receives once per successful Write
}

func newSink() *sink { return &sink{wrote: make(chan struct{}, 1024)} }

func (s *sink) Start(status int, h http.Header) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status, s.header = status, h
	return nil
}

func (s *sink) Write(p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAt > 0 && len(s.chunks)+1 >= s.failAt {
		return errors.New("client gone")
	}
	s.chunks = append(s.chunks, append([]byte(nil), p...))
	s.wrote <- struct{}{}
	return nil
}

func (s *sink) body() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(bytes.Join(s.chunks, nil))
}

func post(path, body string, hdr ...string) gateway.Request {
	h := http.Header{}
	for i := 0; i+1 < len(hdr); i += 2 {
		h.Set(hdr[i], hdr[i+1])
	}
	return gateway.Request{Method: "POST", Path: path, Body: []byte(body), Header: h.Get}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within 30s", what)
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a timing assumption
	}
}

// openAIErr decodes OpenAI's error shape and fails unless it has all three fields.
func openAIErr(t *testing.T, body string) (typ, code, msg string) {
	t.Helper()
	var e struct {
		Error *struct {
			Message *string `json:"message"`
			Type    *string `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == nil || e.Error.Message == nil || e.Error.Type == nil || e.Error.Code == nil {
		t.Fatalf("not OpenAI's error shape: %s", body)
	}
	return *e.Error.Type, *e.Error.Code, *e.Error.Message
}

func TestNonStreamingForward(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	var gotPath, gotReqID, gotAuth, gotSession string
	var gotBody []byte
	w, _ := f.engine(func(rw http.ResponseWriter, r *http.Request) {
		gotPath, gotReqID, gotAuth, gotSession = r.URL.Path, r.Header.Get("X-Request-Id"), r.Header.Get("Authorization"), r.Header.Get("X-Session-ID")
		gotBody, _ = io.ReadAll(r.Body)
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("X-Engine", "yes")
		io.WriteString(rw, `{"id":"cmpl-1","choices":[{"text":"hi"}]}`)
	})
	body := `{"model":"m","prompt":[1,2,3,4,5,6,7,8,9],"max_tokens":3}`
	s := newSink()
	f.gw.Serve(context.Background(), post("/v1/completions", body, "Authorization", "Bearer secret", "X-Session-ID", "s1"), s)
	if s.status != 200 || s.body() != `{"id":"cmpl-1","choices":[{"text":"hi"}]}` {
		t.Fatalf("answer %d %q", s.status, s.body())
	}
	if gotPath != "/v1/completions" || string(gotBody) != body {
		t.Fatalf("engine got %s %q, want the body unchanged on the same path", gotPath, gotBody)
	}
	if gotAuth != "" {
		t.Fatal("the client's Authorization (kvrouter's token) reached the engine")
	}
	if gotSession != "s1" {
		t.Fatalf("session header not forwarded: %q", gotSession)
	}
	h := s.header
	if h.Get(gateway.HeaderWorker) != w || h.Get(gateway.HeaderRequestID) == "" || h.Get(gateway.HeaderRequestID) != gotReqID ||
		h.Get(gateway.HeaderOverlapBlocks) != "0" || h.Get(gateway.HeaderOverlap) != "" || h.Get("X-Engine") != "yes" {
		t.Fatalf("headers %v (engine saw request id %q)", h, gotReqID)
	}
	if h.Get("Content-Length") != "" || h.Get("Connection") != "" {
		t.Fatalf("hop-by-hop or length header passed on: %v", h)
	}
	f.requireIdle()
}

func TestStreamingPassThroughChunkByChunk(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	next := make(chan struct{})
	w, _ := f.engine(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		for i := 0; i < 3; i++ {
			fmt.Fprintf(rw, "data: {\"n\":%d}\n\n", i)
			rw.(http.Flusher).Flush()
			<-next // the test lets the next chunk go only after the client has this one
		}
		io.WriteString(rw, "data: [DONE]\n\n")
	})
	s := newSink()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.gw.Serve(context.Background(), post("/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`), s)
	}()
	for i := 0; i < 3; i++ {
		<-s.wrote // chunk i reached the client while the engine still holds chunk i+1
		if !strings.Contains(s.body(), fmt.Sprintf(`{"n":%d}`, i)) {
			t.Fatalf("chunk %d: client has %q", i, s.body())
		}
		if r, _ := f.load(w); r != 1 {
			t.Fatalf("during the stream %s has %d active requests, want 1", w, r)
		}
		if i == 0 {
			waitUntil(t, "prefill_done after the first chunk", func() bool { _, p := f.load(w); return p == 0 })
		}
		next <- struct{}{}
	}
	<-done
	if s.status != 200 || !strings.HasSuffix(s.body(), "data: [DONE]\n\n") || s.header.Get(gateway.HeaderOverlap) != "unknown" {
		t.Fatalf("stream %d %v %q", s.status, s.header, s.body())
	}
	f.requireIdle()
}

func TestErrorsInOpenAIShape(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	f.engine(func(rw http.ResponseWriter, r *http.Request) { t.Error("no request should reach the engine") })
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown model", "POST", "/v1/completions", `{"model":"gpt-9","prompt":"x"}`, 404, gateway.CodeModelNotFound},
		{"missing model", "POST", "/v1/chat/completions", `{"messages":[]}`, 404, gateway.CodeModelNotFound},
		{"bad json", "POST", "/v1/completions", `{"model":`, 400, "invalid_argument"},
		{"model not a string", "POST", "/v1/completions", `{"model":7}`, 400, "invalid_argument"},
		{"bad prompt", "POST", "/v1/completions", `{"model":"m","prompt":{"x":1}}`, 400, "invalid_argument"},
		{"wrong method", "GET", "/v1/completions", ``, 405, gateway.CodeMethodNotAllowed},
		{"bad session", "POST", "/v1/completions", `{"model":"m","prompt":"x"}`, 400, "invalid_argument"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSink()
			req := post(c.path, c.body)
			req.Method = c.method
			if c.name == "bad session" {
				req = post(c.path, c.body, "X-Session-ID", strings.Repeat("s", 300))
			}
			f.gw.Serve(context.Background(), req, s)
			if s.status != c.status {
				t.Fatalf("status %d, want %d: %s", s.status, c.status, s.body())
			}
			if _, code, _ := openAIErr(t, s.body()); code != c.code {
				t.Fatalf("code %q, want %q", code, c.code)
			}
		})
	}
}

func TestNoWorkerIs503WithRetryAfter(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	s := newSink()
	f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x"}`), s)
	if s.status != 503 || s.header.Get("Retry-After") == "" {
		t.Fatalf("%d %v %s", s.status, s.header, s.body())
	}
	if _, code, _ := openAIErr(t, s.body()); code != "no_eligible_worker" {
		t.Fatal(code)
	}
}

func TestModelsList(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	cfg := statestore.DefaultPoolConfig(16)
	cfg.Models = []string{"b-model"}
	if err := f.rt.PutPool(context.Background(), "q", cfg); err != nil {
		t.Fatal(err)
	}
	s := newSink()
	f.gw.Serve(context.Background(), gateway.Request{Method: "GET", Path: "/v1/models"}, s)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID, Object, OwnedBy string
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(s.body()), &list); err != nil || s.status != 200 || list.Object != "list" {
		t.Fatalf("%d %s", s.status, s.body())
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID+"/"+m.Object)
	}
	if strings.Join(ids, ",") != "b-model/model,m/model,other-name/model" {
		t.Fatalf("models %v", ids)
	}
}

// occupy books load on a worker so that routing prefers the others.
func (f *fixture) occupy(worker string) string {
	f.t.Helper()
	isl := int64(100000)
	d, err := f.rt.Route(context.Background(), core.RouteInput{Pool: testPool, PinnedWorker: worker, ISL: &isl})
	if err != nil {
		f.t.Fatal(err)
	}
	return d.RequestID
}

func (f *fixture) release(id string) {
	if _, err := f.rt.Done(context.Background(), testPool, id); err != nil {
		f.t.Fatal(err)
	}
}

func TestRetryAfterConnectRefused(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	live, _ := f.engine(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		io.WriteString(rw, `{"ok":true}`)
	})
	dead := f.addWorker(testnet.RefusedURL(t))
	busy := f.occupy(live) // the dead worker is now the best choice
	s := newSink()
	f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x"}`), s)
	if s.status != 200 || s.header.Get(gateway.HeaderWorker) != live {
		t.Fatalf("%d worker %q (dead %s): %s", s.status, s.header.Get(gateway.HeaderWorker), dead, s.body())
	}
	f.release(busy)
	f.requireIdle()
}

func TestRetryAfter503And429ThenPassThrough(t *testing.T) {
	for _, status := range []int{503, 429} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			f := newFixture(t, 0, gateway.Options{})
			live, _ := f.engine(func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, `{"ok":true}`) })
			failing, _ := f.engine(func(rw http.ResponseWriter, r *http.Request) {
				rw.Header().Set("Content-Type", "application/json")
				rw.WriteHeader(status)
				io.WriteString(rw, `{"error":{"message":"busy","type":"x","code":1}}`)
			})
			busy := f.occupy(live)
			s := newSink()
			f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x"}`), s)
			if s.status != 200 || s.header.Get(gateway.HeaderWorker) != live {
				t.Fatalf("%d from %q, want 200 from %s after %s answered %d", s.status, s.header.Get(gateway.HeaderWorker), live, failing, status)
			}
			f.release(busy)
			f.requireIdle()

			// Without retries the worker's own answer passes through.
			g, err := gateway.New(f.rt, gateway.Options{NoRetries: true})
			if err != nil {
				t.Fatal(err)
			}
			busy = f.occupy(live)
			s = newSink()
			g.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x"}`), s)
			if s.status != status || !strings.Contains(s.body(), "busy") {
				t.Fatalf("%d %s, want the worker's %d passed through", s.status, s.body(), status)
			}
			f.release(busy)
			f.requireIdle()
		})
	}
}

func TestEveryWorkerDeadIs502(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	f.addWorker(testnet.RefusedURL(t))
	f.addWorker(testnet.RefusedURL(t))
	s := newSink()
	f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x"}`), s)
	if s.status != 502 {
		t.Fatalf("%d %s", s.status, s.body())
	}
	if _, code, _ := openAIErr(t, s.body()); code != gateway.CodeUpstreamConnect {
		t.Fatal(code)
	}
	f.requireIdle()
}

func TestMidStreamFailureEndsWithErrorEvent(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	f.engine(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		io.WriteString(rw, "data: {\"n\":0}\n\ndata: {\"half")
		rw.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the engine dies: the connection is cut mid-chunk
	})
	s := newSink()
	f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x","stream":true}`), s)
	b := s.body()
	i := strings.LastIndex(b, "\n\ndata: ")
	if s.status != 200 || i < 0 || !strings.HasSuffix(b, "\n\n") {
		t.Fatalf("stream %q", b)
	}
	if _, code, _ := openAIErr(t, strings.TrimSpace(b[i+len("\n\ndata: "):])); code != gateway.CodeUpstreamError {
		t.Fatal(code)
	}
	f.requireIdle()
}

func TestClientGoneClosesUpstreamAndFreesLoad(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	upstreamGone := make(chan struct{})
	w, _ := f.engine(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(rw, "data: {\"n\":%d}\n\n", i); err != nil {
				break
			}
			rw.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				close(upstreamGone)
				return
			case <-time.After(10 * time.Millisecond): // the engine's token pace
			}
		}
		close(upstreamGone)
	})
	s := newSink()
	s.failAt = 3
	f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x","stream":true}`), s)
	select {
	case <-upstreamGone:
	case <-time.After(30 * time.Second):
		t.Fatal("the engine never saw its connection close")
	}
	if r, p := f.load(w); r != 0 || p != 0 {
		t.Fatalf("load after the client left: %d requests, %d prefill", r, p)
	}
}

func TestIdleTimeoutMidStream(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{IdleTimeout: 300 * time.Millisecond})
	release := make(chan struct{})
	defer close(release)
	f.engine(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		io.WriteString(rw, "data: {\"n\":0}\n\n")
		rw.(http.Flusher).Flush()
		select { // stalls: sends nothing more
		case <-release:
		case <-r.Context().Done():
		}
	})
	s := newSink()
	f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x","stream":true}`), s)
	if !strings.Contains(s.body(), "idle timeout") {
		t.Fatalf("stream %q", s.body())
	}
	f.requireIdle()
}

func TestLongStreamRenewsItsLease(t *testing.T) {
	f := newFixture(t, 200, gateway.Options{}) // renewal every 100 ms
	hold := make(chan struct{})
	w, _ := f.engine(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		io.WriteString(rw, "data: {}\n\n")
		rw.(http.Flusher).Flush()
		<-hold
		io.WriteString(rw, "data: [DONE]\n\n")
	})
	s := newSink()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"x","stream":true}`), s)
	}()
	waitUntil(t, "two lease renewals", func() bool { return f.st.renewals.Load() >= 2 })
	if r, _ := f.load(w); r != 1 {
		t.Fatalf("the stream's load was released under it: %d active", r)
	}
	close(hold)
	<-done
	n := f.st.renewals.Load()
	f.requireIdle()
	if !strings.HasSuffix(s.body(), "[DONE]\n\n") {
		t.Fatal(s.body())
	}
	_ = n
}

func TestTokenArrayPromptRoutesOnTokens(t *testing.T) {
	f := newFixture(t, 0, gateway.Options{})
	f.engine(func(rw http.ResponseWriter, r *http.Request) { io.WriteString(rw, `{}`) })
	s := newSink()
	f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"other-name","prompt":[1,2,3,4,5,6,7,8]}`), s)
	if s.status != 200 || s.header.Get(gateway.HeaderOverlap) != "" {
		t.Fatalf("%d %v", s.status, s.header)
	}
	s = newSink()
	f.gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","prompt":"text"}`), s)
	if s.status != 200 || s.header.Get(gateway.HeaderOverlap) != "unknown" {
		t.Fatalf("%d %v", s.status, s.header)
	}
}

// downStore answers every call with the store's unavailability (Redis down).
type downStore struct{ statestore.Store }

func (downStore) Pools(context.Context) ([]statestore.PoolInfo, error) {
	return nil, fmt.Errorf("%w: connection refused", statestore.ErrUnavailable)
}

func TestStoreUnavailableIs503WithRetryAfter(t *testing.T) {
	gw, err := gateway.New(core.New(downStore{statestore.NewMemory()}, core.Options{}), gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []gateway.Request{post("/v1/completions", `{"model":"m","prompt":"x"}`), {Method: "GET", Path: "/v1/models"}} {
		s := newSink()
		gw.Serve(context.Background(), req, s)
		if s.status != 503 || s.header.Get("Retry-After") == "" {
			t.Fatalf("%s: %d %v %s", req.Path, s.status, s.header, s.body())
		}
		if _, code, _ := openAIErr(t, s.body()); code != "store_unavailable" {
			t.Fatalf("%s: code %q", req.Path, code)
		}
	}
}
