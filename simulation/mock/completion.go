package mock

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/simulation/engine"
)

// words is the vocabulary of generated text.
var words = strings.Fields(`the of and to in is that for it as was with on be by at this from or an are
not have but had they which one you were all her she there would their we him been has when who will more
no if out so said what up its about into than them can only other new some could time these two may then
do first any my now such like our over man me even most made after also did many before must through back
years where much your way well down should because each just those people how too little state good very
make world still own see men work long get here between both life being under never day same another know
while last might us great old year off come since against go came right used take three`)

// completionRequest is the union of the completion and chat request fields the mock reads.
type completionRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []chatMessage   `json:"messages"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	chatOptions
}

// promptTokens turns the request into token ids and its images (chat with Config.ImageTokens > 0).
func (c *completionRequest) promptTokens(chat bool, imageTokens int) ([]uint32, []mmItem, error) {
	if !chat {
		ids, err := promptIDs(c.Prompt)
		return ids, nil, err
	}
	gen, err := c.generationPrompt()
	if err != nil {
		return nil, nil, err
	}
	p, err := renderChat(c.Messages, gen, imageTokens)
	return p.toks, p.items, err
}

// outputText is the deterministic text of output tokens [from, to) of a prompt.
func outputText(prompt []uint32, from, to int) string {
	var buf [12]byte
	h := xxh3.Hash(u32bytes(prompt))
	var b strings.Builder
	for i := from; i < to; i++ {
		binary.LittleEndian.PutUint64(buf[:8], h)
		binary.LittleEndian.PutUint32(buf[8:], uint32(i))
		b.WriteByte(' ')
		b.WriteString(words[xxh3.Hash(buf[:])%uint64(len(words))])
	}
	return b.String()
}

func u32bytes(t []uint32) []byte {
	b := make([]byte, 4*len(t))
	for i, v := range t {
		binary.LittleEndian.PutUint32(b[4*i:], v)
	}
	return b
}

// await blocks until the first n output tokens of q may be sent: the engine has sampled them and, with
// Config.ITLMs, the n-th is due (first token + (n−1)·ITL). It fails with the request's error (restart,
// abort) or ctx's.
func (s *Server) await(ctx context.Context, q *request, n int) error {
	for {
		gen, firstAt, err := s.progressOf(q)
		if err != nil {
			return err
		}
		if gen >= n {
			return s.pace(ctx, firstAt, n)
		}
		select {
		case <-q.progress:
		case <-q.done: // generated or err is set before done closes
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pace waits until the n-th token is due under Config.ITLMs.
func (s *Server) pace(ctx context.Context, firstAt time.Time, n int) error {
	if s.cfg.ITLMs == 0 || n <= 1 {
		return nil
	}
	due := firstAt.Add(time.Duration(float64(n-1) * s.cfg.ITLMs / s.cfg.Speedup * float64(time.Millisecond)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	ctx := r.Context()
	var req completionRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil {
		writeError(w, 400, "invalid JSON body: "+err.Error())
		return
	}
	faults := s.Faults()
	if faults.SlowMs > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(faults.SlowMs * float64(time.Millisecond))):
		}
	}
	if status, fail := s.injectError(); fail {
		writeError(w, status, "injected fault")
		return
	}
	toks, items, err := req.promptTokens(chat, s.cfg.ImageTokens)
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	if len(toks) == 0 {
		writeError(w, 400, "prompt: no tokens")
		return
	}
	maxTok := s.cfg.DefaultMaxTokens
	if req.MaxCompletionTokens != nil {
		maxTok = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		maxTok = *req.MaxTokens
	}
	if maxTok < 1 || maxTok > s.cfg.MaxTokensLimit {
		writeError(w, 400, fmt.Sprintf("max_tokens %d: must be in [1, %d]", maxTok, s.cfg.MaxTokensLimit))
		return
	}
	model, ok := s.servedModel(w, req.Model)
	if !ok {
		return
	}
	q, err := s.submit(toks, items, maxTok)
	if err != nil {
		if errors.Is(err, engine.ErrTooLong) {
			writeError(w, 400, "prompt too long: "+err.Error())
		} else {
			writeError(w, 500, err.Error())
		}
		return
	}
	// However the handler ends before the engine is done (client gone, write error, cut), the engine
	// drops the request and frees its blocks; a finished request is left alone.
	defer s.abort(q)
	a := answer{id: fmt.Sprintf("cmpl-%s-%d", s.cfg.Name, q.id), object: "text_completion", created: time.Now().Unix(),
		model: model, chat: chat, stream: req.Stream, prompt: toks, maxTok: maxTok, q: q}
	if chat {
		a.id, a.object = fmt.Sprintf("chatcmpl-%s-%d", s.cfg.Name, q.id), "chat.completion"
	}
	if !req.Stream {
		if err := s.await(ctx, q, maxTok); err != nil {
			if ctx.Err() == nil {
				writeError(w, 503, err.Error())
			}
			return
		}
		writeJSON(w, 200, map[string]any{"id": a.id, "object": a.object, "created": a.created, "model": model,
			"choices": []any{a.choice(strings.TrimPrefix(outputText(toks, 0, maxTok), " "), "length")}, "usage": a.usage()})
		return
	}
	if chat {
		a.object = "chat.completion.chunk"
	}
	s.stream(ctx, w, &a, req.StreamOptions != nil && req.StreamOptions.IncludeUsage, s.midStreamCut())
}

// stream sends the answer as SSE, one chunk per output token as the engine samples it (paced by
// Config.ITLMs), then the usage chunk if asked and "data: [DONE]". cutAfter > 0 cuts the connection
// after that many token chunks (the mid-stream faults).
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, a *answer, includeUsage bool, cutAfter int) {
	if err := s.await(ctx, a.q, 1); err != nil {
		if ctx.Err() == nil {
			writeError(w, 503, err.Error())
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	cut := func(sent int) {
		if cutAfter > 0 && sent == min(cutAfter, a.maxTok) {
			s.abort(a.q)
			s.log.Info("mock: fault: stream cut", "request", a.id, "chunks", sent)
			// net/http closes the connection without the terminating chunk and logs nothing.
			panic(http.ErrAbortHandler)
		}
	}
	for i := 0; i < a.maxTok; i++ {
		cut(i)
		if err := s.await(ctx, a.q, i+1); err != nil {
			if ctx.Err() == nil { // the engine restarted: vLLM reports an engine failure in-band
				send(map[string]any{"error": map[string]any{"message": err.Error(), "type": "ServiceUnavailableError", "code": 503}})
			}
			return
		}
		text := outputText(a.prompt, i, i+1)
		var finish any
		if i == 0 {
			text = strings.TrimPrefix(text, " ")
		}
		if i == a.maxTok-1 {
			finish = "length"
		}
		if !send(map[string]any{"id": a.id, "object": a.object, "created": a.created, "model": a.model,
			"choices": []any{a.choice(text, finish)}}) {
			return
		}
	}
	cut(a.maxTok)
	if includeUsage {
		send(map[string]any{"id": a.id, "object": a.object, "created": a.created, "model": a.model,
			"choices": []any{}, "usage": a.usage()})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

// answer is what a completion's response objects share.
type answer struct {
	id, object, model string
	created           int64
	chat, stream      bool
	prompt            []uint32
	maxTok            int
	q                 *request
}

// usage is vLLM's usage object with --enable-prompt-tokens-details: cached_tokens is the engine's prefix
// cache hit at admission, tokens.
func (a *answer) usage() map[string]any {
	return map[string]any{"prompt_tokens": len(a.prompt), "completion_tokens": a.maxTok,
		"total_tokens": len(a.prompt) + a.maxTok, "prompt_tokens_details": map[string]any{"cached_tokens": a.q.cached}}
}

func (a *answer) choice(text string, finish any) map[string]any {
	if !a.chat {
		return map[string]any{"index": 0, "text": text, "finish_reason": finish, "logprobs": nil}
	}
	key := "message"
	if a.stream {
		key = "delta"
	}
	return map[string]any{"index": 0, key: map[string]any{"role": "assistant", "content": text}, "finish_reason": finish}
}
