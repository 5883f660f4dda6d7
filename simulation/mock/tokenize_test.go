package mock

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/simulation/engine"
)

// TestTokenizeEqualsServedTokens: POST /tokenize returns exactly the token ids the engine computes when
// it serves the same prompt or messages. Checked through the engine itself: at block size 1 every
// prompt token is a cached block, so after one completion on an empty cache the pool's resident
// sequence hashes are those of the /tokenize answer, token by token and in order (hashes chain).
func TestTokenizeEqualsServedTokens(t *testing.T) {
	s := startServer(t, Config{Engine: engine.Options{BlockSize: 1, NumBlocks: 4096}})
	msgs := []map[string]any{
		{"role": "system", "content": "be brief"},
		{"role": "user", "content": []map[string]any{{"type": "text", "text": "what is   a\tblock?"}}},
		{"role": "assistant", "content": "a unit of KV cache"},
		{"role": "user", "content": "and a prefix?"},
	}
	f, tr := false, true
	cases := []struct {
		name       string
		path       string
		completion map[string]any
		tokenize   map[string]any
	}{
		{"prompt", "/v1/completions", map[string]any{"prompt": "the quick  brown fox\njumps"},
			map[string]any{"model": "mock-model", "prompt": "the quick  brown fox\njumps", "add_special_tokens": true}},
		{"chat", "/v1/chat/completions", map[string]any{"messages": msgs},
			map[string]any{"model": "mock-model", "messages": msgs}},
		{"chat-explicit-generation-prompt", "/v1/chat/completions", map[string]any{"messages": msgs, "add_generation_prompt": tr},
			map[string]any{"messages": msgs, "add_generation_prompt": tr}},
		{"chat-no-generation-prompt", "/v1/chat/completions", map[string]any{"messages": msgs, "add_generation_prompt": f},
			map[string]any{"messages": msgs, "add_generation_prompt": f}},
		{"chat-continue-final", "/v1/chat/completions", map[string]any{"messages": msgs, "continue_final_message": tr, "add_generation_prompt": f},
			map[string]any{"messages": msgs, "continue_final_message": tr, "add_generation_prompt": f}},
	}
	counts := map[string]int{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			postJSON(t, s.URL()+"/admin/restart", struct{}{}, nil) // empty cache
			var tok tokenizeResponse
			postJSON(t, s.URL()+"/tokenize", c.tokenize, &tok)
			if tok.Count != len(tok.Tokens) || tok.Count == 0 || tok.MaxModelLen != 4096 || tok.TokenStrs != nil {
				t.Fatalf("tokenize answer %+v", tok)
			}
			counts[c.name] = tok.Count
			c.completion["max_tokens"] = 1
			var out struct {
				Usage usage `json:"usage"`
			}
			postJSON(t, s.URL()+c.path, c.completion, &out)
			if out.Usage.PromptTokens != tok.Count {
				t.Fatalf("served %d prompt tokens, /tokenize counted %d", out.Usage.PromptTokens, tok.Count)
			}
			waitFor(t, "engine quiescent", func() string {
				if !s.Blocks().Quiescent {
					return "busy"
				}
				return ""
			})
			want := blockhash.Sequence(nil, blockhash.LocalHashes(nil, tok.Tokens, 1, blockhash.Seed))
			slices.Sort(want)
			if got := s.Blocks().SeqHashes; !slices.Equal(got, want) {
				t.Fatalf("the engine cached %d blocks that differ from the %d tokens of /tokenize", len(got), len(want))
			}
		})
	}
	if counts["chat"] != counts["chat-explicit-generation-prompt"] || counts["chat"] != counts["chat-no-generation-prompt"]+1 ||
		counts["chat-continue-final"] != counts["chat-no-generation-prompt"] {
		t.Fatalf("chat token counts %v: the generation prompt is one token, added by default", counts)
	}

	// return_token_strs gives the words; the model must be the served one; both switches are an error.
	var tok tokenizeResponse
	postJSON(t, s.URL()+"/tokenize", map[string]any{"prompt": "a b", "return_token_strs": true}, &tok)
	if !slices.Equal(tok.TokenStrs, []string{"a", "b"}) || !slices.Equal(tok.Tokens, Tokenize("a b")) {
		t.Fatalf("tokenize with strings: %+v", tok)
	}
	for body, want := range map[string]int{
		`{"model":"other","prompt":"a"}`: 404,
		`{"model":"mock-model"}`:         400,
		`{"messages":[{"role":"user","content":"x"}],"continue_final_message":true,"add_generation_prompt":true}`: 400,
		`{"prompt":[1,2]}`: 400,
	} {
		resp, err := http.Post(s.URL()+"/tokenize", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != want || e.Error.Code != want || e.Error.Message == "" {
			t.Errorf("%s: %d %+v, want %d", body, resp.StatusCode, e, want)
		}
	}
}
