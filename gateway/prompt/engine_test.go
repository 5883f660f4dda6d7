package prompt

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// fakeTokenize stands in for vLLM's POST /tokenize over a real socket: it accepts vLLM's two
// request shapes and answers {"count", "max_model_len", "tokens", "token_strs"}, one token per
// byte of the prompt (or of the messages' JSON), and records what it was sent.
type fakeTokenize struct {
	mu       sync.Mutex
	requests []map[string]json.RawMessage
	status   int           // answer status (default 200)
	raw      string        // answer body instead of the computed one
	block    bool          // wait until the client gives up
	release  chan struct{} // when set, hold answers until closed
}

func (f *fakeTokenize) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/tokenize" {
		http.NotFound(w, r)
		return
	}
	var req map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	status, raw, block, release := f.status, f.raw, f.block, f.release
	f.mu.Unlock()
	if release != nil {
		<-release
	}
	if block {
		<-r.Context().Done()
		return
	}
	if status != 0 && status != http.StatusOK {
		http.Error(w, `{"error": "nope"}`, status)
		return
	}
	if raw != "" {
		_, _ = w.Write([]byte(raw))
		return
	}
	var text string
	if p, ok := req["prompt"]; ok {
		_ = json.Unmarshal(p, &text)
	} else {
		text = string(req["messages"])
	}
	tokens := make([]uint32, len(text))
	for i := range text {
		tokens[i] = uint32(text[i])
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"count": len(tokens), "max_model_len": 8192, "tokens": tokens, "token_strs": nil})
}

func (f *fakeTokenize) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

// TestEngineTokenize: tokenize "engine" asks the worker's /tokenize with vLLM's request shapes,
// and caches answers by (pool, request): two identical prompts cost the server one request.
func TestEngineTokenize(t *testing.T) {
	fake := &fakeTokenize{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	r := newTestResolver(t, Options{})
	cfg := statestore.PoolConfig{Tokenize: statestore.TokenizeEngine}
	ask := func(pool string, kind Kind, body string) Result {
		t.Helper()
		res, err := r.Tokens(context.Background(), Request{Pool: pool, Config: cfg, Kind: kind, Body: []byte(body), EngineURL: srv.URL + "/"})
		if err != nil {
			t.Fatalf("Tokens(%s): %v", body, err)
		}
		if !res.Known || res.Source != SourceEngine {
			t.Fatalf("Tokens(%s) = %+v, want known from the engine", body, res)
		}
		return res
	}
	res := ask("p", Completion, `{"model": "m", "prompt": "abc"}`)
	if !slices.Equal(res.Tokens, []uint32{'a', 'b', 'c'}) {
		t.Fatalf("tokens %v", res.Tokens)
	}
	ask("p", Completion, `{"model": "m", "prompt": "abc", "max_tokens": 5}`) // same prompt: cached
	if n := fake.count(); n != 1 {
		t.Fatalf("server saw %d requests for two identical prompts, want 1", n)
	}
	if got := string(fake.requests[0]["add_special_tokens"]); got != "true" {
		t.Errorf("completion add_special_tokens = %s, want true", got)
	}
	if got := string(fake.requests[0]["model"]); got != `"m"` {
		t.Errorf("model = %s", got)
	}
	ask("other-pool", Completion, `{"model": "m", "prompt": "abc"}`) // another pool: its own entry
	ask("p", Completion, `{"model": "m", "prompt": "abd"}`)
	if n := fake.count(); n != 3 {
		t.Fatalf("server saw %d requests, want 3", n)
	}

	chat := `{"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "temperature": 0}`
	ask("p", Chat, chat)
	ask("p", Chat, strings.ReplaceAll(chat, `"temperature": 0`, `"temperature": 1`)) // sampling knobs do not matter
	if n := fake.count(); n != 4 {
		t.Fatalf("server saw %d requests after two identical chats, want 4", n)
	}
	last := fake.requests[3]
	if string(last["messages"]) != `[{"role":"user","content":"hi"}]` || last["tools"] == nil || last["prompt"] != nil {
		t.Errorf("chat /tokenize request = %v", last)
	}
	// Token-id prompts never reach the engine.
	if res, err := r.Tokens(context.Background(), Request{Config: cfg, Kind: Completion, Body: []byte(`{"prompt": [4, 2]}`)}); err != nil || res.Source != SourceRequest {
		t.Errorf("token prompt: %+v, %v", res, err)
	}
	if _, st := r.Stats(); st.Hits != 2 || st.Entries != 4 {
		t.Errorf("engine cache stats %+v, want 2 hits and 4 entries", st)
	}
}

// TestEngineFailures: a non-200 answer, a malformed or oversized answer, a timeout and a missing
// URL are ErrEngine, and are not cached.
func TestEngineFailures(t *testing.T) {
	fake := &fakeTokenize{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	r := newTestResolver(t, Options{EngineTimeout: 200 * time.Millisecond, MaxEngineResponseBytes: 1 << 10})
	cfg := statestore.PoolConfig{Tokenize: statestore.TokenizeEngine}
	setups := []struct {
		name string
		set  func()
	}{
		{"500", func() { fake.status = 500 }},
		{"malformed", func() { fake.status, fake.raw = 0, `{"tokens": "x"}` }},
		{"no tokens", func() { fake.raw = `{"count": 0}` }},
		{"oversized", func() { fake.raw = `{"tokens": [` + strings.Repeat("1,", 1000) + `1]}` }},
		{"timeout", func() { fake.raw, fake.block = "", true }},
	}
	for _, s := range setups {
		fake.mu.Lock()
		s.set()
		fake.mu.Unlock()
		_, err := r.Tokens(context.Background(), Request{Config: cfg, Kind: Completion, Body: []byte(`{"prompt": "x"}`), EngineURL: srv.URL})
		if !errors.Is(err, ErrEngine) {
			t.Errorf("%s: err = %v, want ErrEngine", s.name, err)
		}
	}
	if _, err := r.Tokens(context.Background(), Request{Config: cfg, Kind: Completion, Body: []byte(`{"prompt": "x"}`)}); !errors.Is(err, ErrEngine) {
		t.Errorf("no URL: err = %v, want ErrEngine", err)
	}
	if _, st := r.Stats(); st.Entries != 0 {
		t.Errorf("failures were cached: %+v", st)
	}
}

// TestEngineInflightShared: identical prompts arriving while the first /tokenize is in flight wait
// for it instead of asking again.
func TestEngineInflightShared(t *testing.T) {
	fake := &fakeTokenize{release: make(chan struct{})}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	r := newTestResolver(t, Options{})
	cfg := statestore.PoolConfig{Tokenize: statestore.TokenizeEngine}
	const callers = 5
	results := make(chan error, callers)
	for i := 0; i < callers; i++ {
		go func() {
			res, err := r.Tokens(context.Background(), Request{Pool: "p", Config: cfg, Kind: Completion, Body: []byte(`{"prompt": "same"}`), EngineURL: srv.URL})
			if err == nil && !slices.Equal(res.Tokens, []uint32{'s', 'a', 'm', 'e'}) {
				err = errors.New("wrong tokens")
			}
			results <- err
		}()
	}
	// Wait (generously) until one call is at the server and the other callers wait for it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.inflightMu.Lock()
		waiting := 0
		for _, c := range r.inflight {
			waiting += c.waiters
		}
		r.inflightMu.Unlock()
		if waiting == callers-1 && fake.count() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("callers never converged: %d waiting, %d at the server", waiting, fake.count())
		}
		time.Sleep(time.Millisecond)
	}
	close(fake.release)
	for i := 0; i < callers; i++ {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if n := fake.count(); n != 1 {
		t.Fatalf("server saw %d requests for %d identical concurrent prompts, want 1", n, callers)
	}
}
