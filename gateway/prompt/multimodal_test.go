package prompt

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

const mmChat = `{"model": "m", "messages": [{"role": "user", "content": [
	{"type": "text", "text": "compare"},
	{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
	{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}, "uuid": "img-1"}]}], "max_tokens": 3}`

// TestEngineChatImages: with tokenize "engine" and an image_token_id, the gateway assigns each image
// its identifier (written into the forwarded body and the /tokenize request as the part's "uuid") and
// places it on its run of placeholder tokens in the engine's answer.
func TestEngineChatImages(t *testing.T) {
	fake := &fakeTokenize{raw: `{"count": 8, "max_model_len": 99, "tokens": [1, 99, 99, 99, 2, 99, 99, 3]}`}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	r := newTestResolver(t, Options{})
	cfg := statestore.PoolConfig{Tokenize: statestore.TokenizeEngine, ImageTokenID: 99}
	ask := func(cfg statestore.PoolConfig, body string) Result {
		t.Helper()
		res, err := r.Tokens(context.Background(), Request{Pool: "p", Config: cfg, Kind: Chat, Body: []byte(body), EngineURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	id0 := blockhash.MMIdentifier("data:image/png;base64,iVBORw0KGgo=", "")
	id1 := blockhash.MMIdentifier("https://example.com/cat.png", "img-1")
	res := ask(cfg, mmChat)
	want := []blockhash.MMItem{
		{Hash: blockhash.MMIdentifierHash(id0), Offset: 1, Length: 3},
		{Hash: blockhash.MMIdentifierHash(id1), Offset: 5, Length: 2},
	}
	if !res.Known || res.Source != SourceEngine || !slices.Equal(res.MMItems, want) {
		t.Fatalf("result %+v, want items %+v", res, want)
	}
	// The forwarded body: the same request, each image part with the router's uuid.
	var body struct {
		Messages []struct {
			Content []map[string]any `json:"content"`
		} `json:"messages"`
		MaxTokens int `json:"max_tokens"`
	}
	if err := json.Unmarshal(res.Body, &body); err != nil {
		t.Fatal(err)
	}
	parts := body.Messages[0].Content
	if body.MaxTokens != 3 || len(parts) != 3 || parts[0]["text"] != "compare" || parts[0]["uuid"] != nil ||
		parts[1]["uuid"] != id0 || parts[2]["uuid"] != id1 {
		t.Fatalf("forwarded body %s", res.Body)
	}
	if !strings.Contains(string(fake.requests[0]["messages"]), id1) {
		t.Errorf("/tokenize must see the assigned uuids: %s", fake.requests[0]["messages"])
	}

	// Not one run per image: load only, but the uuids are still assigned.
	fake.raw = `{"count": 3, "max_model_len": 99, "tokens": [1, 99, 3]}`
	if res := ask(cfg, strings.Replace(mmChat, "compare", "compare again", 1)); res.Known || res.Body == nil {
		t.Errorf("one run for two images: %+v", res)
	}
	// No image_token_id, or mm_processor_kwargs: load only, /tokenize not asked.
	n := fake.count()
	if res := ask(statestore.PoolConfig{Tokenize: statestore.TokenizeEngine}, mmChat); res.Known || res.Body == nil {
		t.Errorf("no image_token_id: %+v", res)
	}
	if res := ask(cfg, strings.Replace(mmChat, `"max_tokens": 3`, `"mm_processor_kwargs": {"fps": 1}`, 1)); res.Known {
		t.Errorf("mm_processor_kwargs: %+v", res)
	}
	// Audio: load only, the body untouched.
	audio := `{"model": "m", "messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA==", "format": "wav"}}]}]}`
	if res := ask(cfg, audio); res.Known || res.Body != nil {
		t.Errorf("audio: %+v", res)
	}
	if fake.count() != n {
		t.Errorf("/tokenize asked %d times for requests routed by load", fake.count()-n)
	}
	// A failed /tokenize: an ErrEngine error, the uuids still forwarded.
	fake.status = 500
	if res, err := r.Tokens(context.Background(), Request{Pool: "p", Config: cfg, Kind: Chat, Body: []byte(strings.Replace(mmChat, "compare", "fail", 1)), EngineURL: srv.URL}); !errors.Is(err, ErrEngine) || res.Known || res.Body == nil {
		t.Errorf("failed /tokenize: %+v, %v", res, err)
	}
	fake.status = 0
	// No HTML escaping in the rewritten body.
	if res := ask(cfg, strings.Replace(mmChat, "compare", "a<b & c>d", 1)); !strings.Contains(string(res.Body), "a<b & c>d") {
		t.Errorf("rewritten body escapes HTML: %s", res.Body)
	}
	// Text-only chats are unchanged: known from the engine, body not rewritten.
	fake.raw = ""
	if res := ask(cfg, `{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}`); !res.Known || res.Body != nil || res.MMItems != nil {
		t.Errorf("text-only: %+v", res)
	}
}

func TestPlaceholderRuns(t *testing.T) {
	got := placeholderRuns([]uint32{7, 7, 1, 7, 2, 2, 7}, 7)
	want := []blockhash.MMItem{{Offset: 0, Length: 2}, {Offset: 3, Length: 1}, {Offset: 6, Length: 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("runs %+v", got)
	}
	if placeholderRuns([]uint32{1, 2}, 7) != nil {
		t.Fatal("no runs: nil")
	}
}

// A part without "type" but with "image_url" (vLLM's uuid form) and a bare-string image_url are images.
func TestScanChatMedia(t *testing.T) {
	m, err := scanChatMedia([]byte(`{"messages": [{"role": "system", "content": "sys"},
		{"role": "user", "content": ["plain", {"image_url": "https://x/a.png", "uuid": "u"}, {"type": "input_image", "image_url": "https://x/b.png"}, {"text": "t"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []chatImage{{url: "https://x/a.png", uuid: "u"}, {url: "https://x/b.png"}}
	if m.other || !slices.Equal(m.images, want) {
		t.Fatalf("%+v", m)
	}
}
