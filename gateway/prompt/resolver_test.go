package prompt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
	"github.com/kvrouter/kvrouter/tokenizer/tokenizertest"
)

func newTestResolver(t testing.TB, opts Options) *Resolver {
	t.Helper()
	r, err := NewResolver(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// llamaPool is a pool on Meta-Llama-3-8B-Instruct's tokenizer.json with its chat template.
func llamaPool(t testing.TB) statestore.PoolConfig {
	return statestore.PoolConfig{
		Tokenizer:    tokenizertest.Path(t, "Meta-Llama-3-8B-Instruct.json"),
		ChatTemplate: tokenizertest.Path(t, "meta-llama-3-8b-instruct/tokenizer_config.json"),
	}
}

func tokens(t *testing.T, r *Resolver, cfg statestore.PoolConfig, kind Kind, body string) Result {
	t.Helper()
	res, err := r.Tokens(context.Background(), Request{Pool: "p", Config: cfg, Kind: kind, Body: []byte(body)})
	if err != nil {
		t.Fatalf("Tokens(%s): %v", body, err)
	}
	return res
}

// llamaHello is Llama-3's "Hello!" user turn with the generation prompt (NOTES.md).
var llamaHello = []uint32{128000, 128006, 882, 128007, 271, 9906, 0, 128009, 128006, 78191, 128007, 271}

// TestLlama3ChatIDs: the checked ids, with exactly one BOS (the template's), for the tokenizer.json
// with an explicit template and for the tiktoken.model whose tokenizer_config.json beside it
// supplies the template by default.
func TestLlama3ChatIDs(t *testing.T) {
	r := newTestResolver(t, Options{})
	body := `{"model": "llama", "messages": [{"role": "user", "content": "Hello!"}]}`
	for _, cfg := range []statestore.PoolConfig{
		llamaPool(t),
		{Tokenizer: tokenizertest.Path(t, "meta-llama-3-8b-instruct/tiktoken.model")},
	} {
		for round := 0; round < 2; round++ { // the second round comes from the segment cache
			res := tokens(t, r, cfg, Chat, body)
			if !res.Known || res.Source != SourceLocal || !slices.Equal(res.Tokens, llamaHello) {
				t.Fatalf("%s round %d: %+v\nwant %v", cfg.Tokenizer, round, res, llamaHello)
			}
			if n := countOf(res.Tokens, 128000); n != 1 {
				t.Fatalf("%d BOS tokens, want 1 (no double BOS)", n)
			}
		}
	}
	// add_special_tokens=true on a chat request (a vLLM extension) adds the second BOS the engine
	// would then compute too.
	res := tokens(t, r, llamaPool(t), Chat, `{"add_special_tokens": true, "messages": [{"role": "user", "content": "Hello!"}]}`)
	if want := append([]uint32{128000}, llamaHello...); !slices.Equal(res.Tokens, want) {
		t.Fatalf("add_special_tokens: %v, want %v", res.Tokens, want)
	}
}

func countOf(ids []uint32, id uint32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestCompletionPrompts: a string prompt gets the post-processor's BOS (add_special_tokens
// defaults to true for completions), token arrays pass through, batches route by the first.
func TestCompletionPrompts(t *testing.T) {
	r := newTestResolver(t, Options{})
	cfg := llamaPool(t)
	cases := []struct {
		body string
		want []uint32
		src  Source
	}{
		{`{"prompt": "Hello!"}`, []uint32{128000, 9906, 0}, SourceLocal},
		{`{"prompt": "Hello!", "add_special_tokens": false}`, []uint32{9906, 0}, SourceLocal},
		// A prompt that writes the BOS itself gets a second one, as in vLLM.
		{`{"prompt": "<|begin_of_text|>Hello!"}`, []uint32{128000, 128000, 9906, 0}, SourceLocal},
		{`{"prompt": [1, 2, 3]}`, []uint32{1, 2, 3}, SourceRequest},
		{`{"prompt": ["Hello!", "other"]}`, []uint32{128000, 9906, 0}, SourceLocal},
		{`{"prompt": [[7, 8], [9]]}`, []uint32{7, 8}, SourceRequest},
	}
	for _, c := range cases {
		res := tokens(t, r, cfg, Completion, c.body)
		if !res.Known || res.Source != c.src || !slices.Equal(res.Tokens, c.want) {
			t.Errorf("%s: %+v, want %v from %s", c.body, res, c.want, c.src)
		}
	}
	// Token arrays need no tokenizer at all.
	if res := tokens(t, r, statestore.PoolConfig{}, Completion, `{"prompt": [5]}`); !res.Known || res.Source != SourceRequest {
		t.Errorf("token prompt without tokenizer: %+v", res)
	}
}

// TestNoBOSTokenizer: a tokenizer whose post-processor adds nothing (Qwen2's) adds no BOS to
// completions prompts.
func TestNoBOSTokenizer(t *testing.T) {
	r := newTestResolver(t, Options{})
	cfg := statestore.PoolConfig{Tokenizer: byteTokenizer(t)}
	res := tokens(t, r, cfg, Completion, `{"prompt": "hi"}`)
	if !slices.Equal(res.Tokens, []uint32{'h', 'i'}) {
		t.Fatalf("got %v, want the two byte ids", res.Tokens)
	}
}

// byteTokenizer writes a minimal byte-level tokenizer.json (ids = bytes, no merges) whose
// post-processor is ByteLevel, as Qwen2's is.
func byteTokenizer(t testing.TB) string {
	t.Helper()
	// The GPT-2 byte-to-rune table: printable Latin-1 bytes map to themselves, the rest to 256+n.
	var vocab strings.Builder
	vocab.WriteString("{")
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE) {
			r = rune(256 + n)
			n++
		}
		if b > 0 {
			vocab.WriteString(",")
		}
		vocab.WriteString(strconvQuote(string(r)) + ":" + itoa(b))
	}
	vocab.WriteString("}")
	data := `{"version": "1.0", "added_tokens": [], "normalizer": null,
	  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
	  "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
	  "model": {"type": "BPE", "dropout": null, "unk_token": null, "vocab": ` + vocab.String() + `, "merges": []}}`
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBadBodies: body problems are ErrBadRequest, whatever the tokenize mode.
func TestBadBodies(t *testing.T) {
	r := newTestResolver(t, Options{})
	cfg := llamaPool(t)
	cases := []struct {
		kind Kind
		body string
	}{
		{Completion, `not json`},
		{Completion, `[1, 2]`},
		{Completion, `{"prompt": 5}`},
		{Completion, `{"prompt": []}`},
		{Completion, `{"prompt": [1, -2]}`},
		{Completion, `{"prompt": [1, 4294967296]}`},
		{Completion, `{"prompt": ["a", 1]}`},
		{Completion, `{"prompt": [[1], ["x"]]}`},
		{Completion, `{"prompt": "x", "model": 3}`},
		{Completion, `{"prompt": "x"} trailing`},
		{Chat, `{"messages": []}`},
		{Chat, `{"messages": "hi"}`},
		{Chat, `{"messages": [{"content": "no role"}]}`},
		{Chat, `{"messages": [{"role": "user", "content": 5}]}`},
		{Chat, `{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}`},
		{Chat, `{"messages": [{"role": "assistant", "content": null, "tool_calls": [{"function": {"name": "f", "arguments": "{bad"}}]}]}`},
		{Chat, `{"messages": [{"role": "user", "content": "x"}], "tools": {}}`},
		{Chat, `{"messages": [{"role": "user", "content": "x"}], "add_generation_prompt": "yes"}`},
		{Chat, `{"messages": [{"role": "user", "content": "x"}], "continue_final_message": true}`},
		{Chat, `{"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []}`},
		{Chat, `{"messages": [` + strings.Repeat(`{"a":[`, 200) + `]}]}`},
	}
	for _, mode := range []string{statestore.TokenizeLocal, statestore.TokenizeEngine} {
		cfg.Tokenize = mode
		for _, c := range cases {
			_, err := r.Tokens(context.Background(), Request{Config: cfg, Kind: c.kind, Body: []byte(c.body), EngineURL: "http://127.0.0.1:1"})
			if !errors.Is(err, ErrBadRequest) {
				t.Errorf("%s %s: err = %v, want ErrBadRequest", mode, c.body, err)
			}
		}
	}
}

// TestTemplateRefusal: a conversation the template refuses (Mistral's role alternation) is a bad
// request carrying the template's message.
func TestTemplateRefusal(t *testing.T) {
	r := newTestResolver(t, Options{})
	cfg := statestore.PoolConfig{Tokenizer: tokenizertest.Path(t, "Meta-Llama-3-8B-Instruct.json"),
		ChatTemplate: "testdata/templates/mistral-7b-instruct-v0.2.tokenizer_config.json"}
	_, err := r.Tokens(context.Background(), Request{Config: cfg, Kind: Chat,
		Body: []byte(`{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}`)})
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "must alternate") {
		t.Fatalf("err = %v, want ErrBadRequest with the template's message", err)
	}
}

// TestUnknownPrompts: no tokenizer, no template, or multimodal content → Known=false, no error.
func TestUnknownPrompts(t *testing.T) {
	r := newTestResolver(t, Options{})
	chat := `{"messages": [{"role": "user", "content": "hi"}]}`
	check := func(name string, cfg statestore.PoolConfig, kind Kind, body string) {
		t.Helper()
		res := tokens(t, r, cfg, kind, body)
		if res.Known || res.Source != SourceNone || res.Tokens != nil {
			t.Errorf("%s: %+v, want unknown", name, res)
		}
	}
	check("no tokenizer chat", statestore.PoolConfig{}, Chat, chat)
	check("no tokenizer completion", statestore.PoolConfig{}, Completion, `{"prompt": "hi"}`)
	check("tokenize none", statestore.PoolConfig{Tokenizer: tokenizertest.Path(t, "Meta-Llama-3-8B-Instruct.json"), Tokenize: "none"}, Chat, chat)
	// The tokenizer.json's directory holds no tokenizer_config.json or chat_template.jinja.
	check("no template", statestore.PoolConfig{Tokenizer: byteTokenizer(t)}, Chat, chat)
	check("image part", llamaPool(t), Chat, `{"messages": [{"role": "user", "content": [
		{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}`)
}

// TestLoadErrors: a missing or broken file is an error naming it, on every call, not a panic.
func TestLoadErrors(t *testing.T) {
	r := newTestResolver(t, Options{})
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope", "tokenizer.json")
	broken := filepath.Join(dir, "broken.jinja")
	if err := os.WriteFile(broken, []byte("{% if %}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		cfg  statestore.PoolConfig
		kind Kind
		file string
	}{
		{statestore.PoolConfig{Tokenizer: missing}, Completion, missing},
		{statestore.PoolConfig{Tokenizer: byteTokenizer(t), ChatTemplate: filepath.Join(dir, "absent.json")}, Chat, "absent.json"},
		{statestore.PoolConfig{Tokenizer: byteTokenizer(t), ChatTemplate: broken}, Chat, broken},
	}
	for _, c := range cases {
		body := `{"prompt": "x"}`
		if c.kind == Chat {
			body = `{"messages": [{"role": "user", "content": "x"}]}`
		}
		for i := 0; i < 2; i++ {
			_, err := r.Tokens(context.Background(), Request{Config: c.cfg, Kind: c.kind, Body: []byte(body)})
			if err == nil || !strings.Contains(err.Error(), c.file) || errors.Is(err, ErrBadRequest) {
				t.Errorf("call %d: err = %v, want a load error naming %s", i, err, c.file)
			}
		}
	}
}

// byteText is what byteTokenizer encodes text to.
func byteText(s string) []uint32 {
	ids := make([]uint32, len(s))
	for i := range len(s) {
		ids[i] = uint32(s[i])
	}
	return ids
}

// TestTemplateFiles: the default template beside the tokenizer (chat_template.jinja before
// tokenizer_config.json's), special tokens from tokenizer_config.json, and named templates
// (tool_use when the request has tools).
func TestTemplateFiles(t *testing.T) {
	r := newTestResolver(t, Options{})
	write := func(dir, name, data string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	chat := `{"messages": [{"role": "user", "content": "x"}]}`
	withTools := `{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}]}`

	tok := byteTokenizer(t)
	dir := filepath.Dir(tok)
	write(dir, "tokenizer_config.json", `{"bos_token": {"content": "<B>"}, "eos_token": "<E>", "chat_template": "C{{ bos_token }}"}`)
	if got := tokens(t, r, statestore.PoolConfig{Tokenizer: tok}, Chat, chat).Tokens; !slices.Equal(got, byteText("C<B>")) {
		t.Errorf("tokenizer_config.json template: %v", got)
	}
	r = newTestResolver(t, Options{}) // templates are kept by path: a fresh resolver sees the new file
	write(dir, "chat_template.jinja", "J{{ eos_token }}{{ messages|length }}")
	if got := tokens(t, r, statestore.PoolConfig{Tokenizer: tok}, Chat, chat).Tokens; !slices.Equal(got, byteText("J<E>1")) {
		t.Errorf("chat_template.jinja beside the tokenizer: %v", got)
	}

	named := write(t.TempDir(), "tokenizer_config.json", `{"chat_template": [{"name": "default", "template": "D{{ messages[0].content }}"},
		{"name": "tool_use", "template": "T{{ tools|length }}{{ tools[0].function.description }}"}]}`)
	cfg := statestore.PoolConfig{Tokenizer: tok, ChatTemplate: named}
	if got := tokens(t, r, cfg, Chat, chat).Tokens; !slices.Equal(got, byteText("Dx")) {
		t.Errorf("named default: %v", got)
	}
	if got := tokens(t, r, cfg, Chat, withTools).Tokens; !slices.Equal(got, byteText("T1")) { // description: null prints nothing
		t.Errorf("named tool_use: %v", got)
	}
}

// TestContinueFinalMessage: the render is cut after the final message's (stripped) text, so the
// ids end with the partial answer and no end-of-turn token.
func TestContinueFinalMessage(t *testing.T) {
	r := newTestResolver(t, Options{})
	res := tokens(t, r, llamaPool(t), Chat, `{"add_generation_prompt": false, "continue_final_message": true,
		"messages": [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi there "}]}`)
	plain := tokens(t, r, llamaPool(t), Chat, `{"add_generation_prompt": false,
		"messages": [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi there "}]}`)
	// The full render ends "Hi there<|eot_id|>" (Llama-3 trims content); the continued one drops the <|eot_id|>.
	if !slices.Equal(res.Tokens, plain.Tokens[:len(plain.Tokens)-1]) || plain.Tokens[len(plain.Tokens)-1] != 128009 {
		t.Fatalf("continue_final_message: %v\nfull render: %v", res.Tokens, plain.Tokens)
	}
}
