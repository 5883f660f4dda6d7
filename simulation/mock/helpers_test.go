package mock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startServer starts a mock engine on ephemeral ports, stopped at the end of the test.
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		s.Close()
	})
	return s
}

// postJSON posts body and decodes a 200 answer into out.
func postJSON(t *testing.T, url string, body, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("POST %s: %v in %s", url, err, raw)
		}
	}
}

// sseEvent is one "data:" payload of a stream, or the error that ended it (io.EOF: clean end).
type sseEvent struct {
	data string
	err  error
}

// openStream posts a streaming request and returns its events as they arrive, and a cancel func that
// closes the connection (the client going away).
func openStream(t *testing.T, url string, body any) (<-chan sseEvent, context.CancelFunc) {
	t.Helper()
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("POST %s: %d %s", url, resp.StatusCode, raw)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	ch := make(chan sseEvent, 1024)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				ch <- sseEvent{data: d}
			}
		}
		err := sc.Err()
		if err == nil {
			err = io.EOF
		}
		ch <- sseEvent{err: err}
	}()
	return ch, cancel
}

// next returns the stream's next event, failing the test after a generous deadline.
func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(60 * time.Second):
		t.Fatal("no stream event within 60s")
		return sseEvent{}
	}
}

// waitFor polls cond until it returns "" (met) or a generous deadline passes; the last reason is reported.
func waitFor(t *testing.T, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not met within 60s: %s", what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// idleEngine is a waitFor condition: nothing running or waiting, no KV block in use.
func idleEngine(s *Server) func() string {
	return func() string {
		if b := s.Blocks(); b.Running != 0 || b.Waiting != 0 || b.Used != 0 {
			return fmt.Sprintf("running %d waiting %d used %d", b.Running, b.Waiting, b.Used)
		}
		return ""
	}
}

// chunk is the part of a streamed completion chunk the tests read.
type chunk struct {
	Object  string `json:"object"`
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Content string `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func decodeChunk(t *testing.T, ev sseEvent) chunk {
	t.Helper()
	if ev.err != nil {
		t.Fatalf("stream ended: %v", ev.err)
	}
	var c chunk
	if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
		t.Fatalf("chunk %q: %v", ev.data, err)
	}
	return c
}

// words returns a prompt of n distinct words starting at the given offset.
func promptWords(offset, n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("w%d", offset+i)
	}
	return strings.Join(w, " ")
}

// toMessages converts test messages to the mock's chat messages.
func toMessages(t *testing.T, msgs []map[string]any) []chatMessage {
	t.Helper()
	b, err := json.Marshal(msgs)
	if err != nil {
		t.Fatal(err)
	}
	var out []chatMessage
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
