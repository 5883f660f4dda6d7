package mock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/simulation/engine"
)

// TestStreamTokensInOrderWithUsage: a streamed completion sends one chunk per output token, in order,
// the last with finish_reason "length", then the usage chunk and [DONE]; usage reports the engine's
// prefix cache hit for streamed and non-streamed answers alike.
func TestStreamTokensInOrderWithUsage(t *testing.T) {
	s := startServer(t, Config{Speedup: 4})
	prompt := promptWords(0, 70) // block size 16: 4 full blocks, (70−1)/16 = 4 may hit
	const maxTok = 12
	toks := Tokenize(prompt)

	for round, wantCached := range []int{0, 64} {
		ch, _ := openStream(t, s.URL()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": maxTok,
			"stream": true, "stream_options": map[string]any{"include_usage": true}})
		var got []string
		for i := 0; i < maxTok; i++ {
			c := decodeChunk(t, next(t, ch))
			if len(c.Choices) != 1 || c.Usage != nil {
				t.Fatalf("round %d chunk %d: %+v", round, i, c)
			}
			fin := c.Choices[0].FinishReason
			if (i == maxTok-1) != (fin != nil && *fin == "length") {
				t.Fatalf("round %d chunk %d: finish_reason %v", round, i, fin)
			}
			got = append(got, c.Choices[0].Text)
		}
		if want := strings.TrimPrefix(outputText(toks, 0, maxTok), " "); strings.Join(got, "") != want {
			t.Fatalf("round %d: streamed %q, want %q", round, strings.Join(got, ""), want)
		}
		if want := strings.TrimPrefix(outputText(toks, 0, 1), " "); got[0] != want {
			t.Fatalf("round %d: first chunk %q, want %q (one token per chunk)", round, got[0], want)
		}
		u := decodeChunk(t, next(t, ch))
		if len(u.Choices) != 0 || u.Usage == nil || u.Usage.PromptTokens != len(toks) ||
			u.Usage.CompletionTokens != maxTok || u.Usage.PromptTokensDetails.CachedTokens != wantCached {
			t.Fatalf("round %d: usage chunk %+v, want cached %d", round, u.Usage, wantCached)
		}
		if ev := next(t, ch); ev.data != "[DONE]" {
			t.Fatalf("round %d: %+v, want [DONE]", round, ev)
		}
		if ev := next(t, ch); ev.err != io.EOF {
			t.Fatalf("round %d: after [DONE]: %+v", round, ev)
		}
	}

	// Non-streamed: the whole answer, same usage shape; the prompt's blocks are cached by now.
	var out struct {
		Choices []struct{ Text string } `json:"choices"`
		Usage   usage                   `json:"usage"`
	}
	postJSON(t, s.URL()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": maxTok}, &out)
	if want := strings.TrimPrefix(outputText(toks, 0, maxTok), " "); len(out.Choices) != 1 || out.Choices[0].Text != want {
		t.Fatalf("answer %+v, want %q", out.Choices, want)
	}
	if out.Usage.PromptTokens != len(toks) || out.Usage.PromptTokensDetails.CachedTokens != 64 {
		t.Fatalf("usage %+v, want %d prompt tokens, 64 cached", out.Usage, len(toks))
	}

	// Chat, streamed: content deltas, usage with the hit of the shared conversation prefix.
	msgs := []map[string]any{{"role": "user", "content": promptWords(100, 40)}}
	for round, wantCached := range []int{0, 32} {
		ch, _ := openStream(t, s.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 3,
			"stream": true, "stream_options": map[string]any{"include_usage": true}})
		for i := 0; i < 3; i++ {
			if c := decodeChunk(t, next(t, ch)); c.Object != "chat.completion.chunk" || c.Choices[0].Delta.Content == "" {
				t.Fatalf("chat round %d chunk %d: %+v", round, i, c)
			}
		}
		// 42 tokens ("user:", 40 words, "assistant:"): 2 full blocks of 16 may hit.
		if u := decodeChunk(t, next(t, ch)); u.Usage == nil || u.Usage.PromptTokens != 42 || u.Usage.PromptTokensDetails.CachedTokens != wantCached {
			t.Fatalf("chat round %d: usage %+v, want 42 prompt tokens, %d cached", round, u.Usage, wantCached)
		}
	}
}

// TestStreamFollowsEngineDecodes: with a decode step of an hour (and a quick prefill), the first token
// arrives while the engine is provably still generating the rest — the stream is not one burst at the
// end. Closing the connection then aborts the request in the engine: its KV blocks are freed.
func TestStreamFollowsEngineDecodes(t *testing.T) {
	s := startServer(t, Config{Engine: engine.Options{DecodeMsPerSeq: 3_600_000}})
	ch, cancel := openStream(t, s.URL()+"/v1/completions", map[string]any{"prompt": promptWords(0, 40), "max_tokens": 4, "stream": true})
	c := decodeChunk(t, next(t, ch))
	if len(c.Choices) != 1 || c.Choices[0].FinishReason != nil {
		t.Fatalf("first chunk %+v", c)
	}
	if b := s.Blocks(); b.Running != 1 || b.Used == 0 {
		t.Fatalf("after the first token: %d running, %d blocks used; want the request still decoding", b.Running, b.Used)
	}
	select {
	case ev := <-ch:
		t.Fatalf("a second event before the engine decoded a second token: %+v", ev)
	default:
	}
	cancel()
	waitFor(t, "client disconnect aborts the request", idleEngine(s))
}

// TestStreamPacedByITL: Config.ITLMs spaces the chunks even when the engine is done sooner. With an ITL
// of an hour the engine finishes (all its blocks released) while the stream has sent only its first
// token and stays open.
func TestStreamPacedByITL(t *testing.T) {
	s := startServer(t, Config{ITLMs: 3_600_000})
	ch, cancel := openStream(t, s.URL()+"/v1/completions", map[string]any{"prompt": promptWords(0, 20), "max_tokens": 3, "stream": true})
	decodeChunk(t, next(t, ch))
	waitFor(t, "the engine samples all 3 tokens", func() string {
		if b := s.Blocks(); !b.Quiescent {
			return "engine busy"
		}
		return ""
	})
	select {
	case ev := <-ch:
		t.Fatalf("chunk 2 arrived before its ITL: %+v", ev)
	default:
	}
	cancel()
}

// TestFailMidStreamCutsConnection: the fault cuts the TCP stream after N chunks, without [DONE], and the
// engine drops the request; a non-streamed request is unaffected.
func TestFailMidStreamCutsConnection(t *testing.T) {
	s := startServer(t, Config{})
	postJSON(t, s.URL()+"/admin/faults", Faults{FailMidStreamAfter: 2}, nil)
	ch, _ := openStream(t, s.URL()+"/v1/chat/completions", map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "hello there"}}, "max_tokens": 5, "stream": true})
	decodeChunk(t, next(t, ch))
	decodeChunk(t, next(t, ch))
	ev := next(t, ch)
	if ev.err == nil || !errors.Is(ev.err, io.ErrUnexpectedEOF) {
		t.Fatalf("after 2 chunks: %+v, want the connection cut (unexpected EOF)", ev)
	}
	waitFor(t, "the cut request leaves the engine", idleEngine(s))

	// Shorter than the cut: all chunks, then the cut before [DONE].
	ch, _ = openStream(t, s.URL()+"/v1/completions", map[string]any{"prompt": "a b c", "max_tokens": 1, "stream": true})
	decodeChunk(t, next(t, ch))
	if ev := next(t, ch); !errors.Is(ev.err, io.ErrUnexpectedEOF) {
		t.Fatalf("after the only chunk: %+v, want the connection cut", ev)
	}

	var out struct {
		Choices []struct{ Text string } `json:"choices"`
	}
	postJSON(t, s.URL()+"/v1/completions", map[string]any{"prompt": "a b c", "max_tokens": 5}, &out)
	if len(out.Choices) != 1 || len(strings.Fields(out.Choices[0].Text)) != 5 {
		t.Fatalf("non-streamed answer %+v", out)
	}

	// fail_mid_stream_next: only the next stream, after its first chunk; the one after is whole.
	postJSON(t, s.URL()+"/admin/faults", Faults{FailMidStreamNext: 1}, nil)
	for round, wantChunks := range []int{1, 3} {
		ch, _ := openStream(t, s.URL()+"/v1/completions", map[string]any{"prompt": "a b c", "max_tokens": 3, "stream": true})
		for i := 0; i < wantChunks; i++ {
			decodeChunk(t, next(t, ch))
		}
		ev := next(t, ch)
		if cut := errors.Is(ev.err, io.ErrUnexpectedEOF); cut != (round == 0) || (!cut && ev.data != "[DONE]") {
			t.Fatalf("round %d after %d chunks: %+v", round, wantChunks, ev)
		}
	}
	if f := s.Faults(); f.FailMidStreamNext != 0 {
		t.Fatalf("fail_mid_stream_next not consumed: %+v", f)
	}
}

// TestDisconnectAbortsNonStreamed: a client that leaves while its non-streamed answer is being generated
// makes the engine drop the request too.
func TestDisconnectAbortsNonStreamed(t *testing.T) {
	s := startServer(t, Config{Engine: engine.Options{DecodeMsPerSeq: 3_600_000}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL()+"/v1/completions",
		strings.NewReader(`{"prompt": "one two three four five", "max_tokens": 3}`))
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitFor(t, "the engine decodes the request", func() string {
		if b := s.Blocks(); b.Running != 1 || b.Used == 0 {
			return fmt.Sprintf("running %d used %d", b.Running, b.Used)
		}
		return ""
	})
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the request completed although its decode step lasts an hour")
	}
	waitFor(t, "client disconnect aborts the request", idleEngine(s))
}
