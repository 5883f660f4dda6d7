package mock

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/simulation/engine"
)

// maxBody bounds a request body, bytes.
const maxBody = 64 << 20

// words is the vocabulary of generated text.
var words = strings.Fields(`the of and to in is that for it as was with on be by at this from or an are
not have but had they which one you were all her she there would their we him been has when who will more
no if out so said what up its about into than them can only other new some could time these two may then
do first any my now such like our over man me even most made after also did many before must through back
years where much your way well down should because each just those people how too little state good very
make world still own see men work long get here between both life being under never day same another know
while last might us great old year off come since against go came right used take three`)

// Server is one simulated engine behind its HTTP listener.
type Server struct {
	*Engine
	srv  *http.Server
	ln   net.Listener
	reg  *prometheus.Registry
	done chan struct{}
}

// Start starts an engine and its HTTP server; both stop when ctx is done (or Close).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	e, err := NewEngine(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", e.cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("mock %s: listen %s: %w", e.cfg.Name, e.cfg.HTTPAddr, err)
	}
	if err := e.Start(ctx); err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{Engine: e, ln: ln, reg: prometheus.NewRegistry(), done: make(chan struct{})}
	s.registerMetrics()
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	go func() {
		<-ctx.Done()
		s.Close()
	}()
	return s, nil
}

// URL is the server's base URL ("http://127.0.0.1:port").
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// Close stops the HTTP server and the publisher.
func (s *Server) Close() error {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(c)
	<-s.done
	if e := s.Engine.Close(); err == nil {
		err = e
	}
	return err
}

func (s *Server) registerMetrics() {
	lbl := prometheus.Labels{"model_name": s.cfg.Model}
	gauge := func(name, help string, f func() float64) {
		s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: lbl}, f))
	}
	counter := func(name, help string, f func() float64) {
		s.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: lbl}, f))
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func() float64 {
		r, _, _ := s.load()
		return float64(r)
	})
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func() float64 {
		_, w, _ := s.load()
		return float64(w)
	})
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", func() float64 {
		_, _, u := s.load()
		return u
	})
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", func() float64 { return float64(s.promptTokens.Load()) })
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", func() float64 { return float64(s.genTokens.Load()) })
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", func() float64 { return float64(s.cacheQueries.Load()) })
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", func() float64 { return float64(s.cacheHits.Load()) })
	counter("vllm:request_success_total", "Count of successfully processed requests.", func() float64 { return float64(s.success.Load()) })
	counter("kvrouter_mock_event_messages_total", "KV event messages handed to the publisher (dropped included).", func() float64 { return float64(s.published.Load()) })
	counter("kvrouter_mock_event_messages_dropped_total", "KV event messages dropped by fault injection (replayable).", func() float64 { return float64(s.dropped.Load()) })
}

// Handler is the engine's HTTP API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.complete(w, r, true) })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"object": "list", "data": []any{map[string]any{
			"id": s.cfg.Model, "object": "model", "owned_by": "kvrouter-mock", "root": s.cfg.Model,
			"max_model_len": s.cfg.Engine.NumBlocks * s.cfg.Engine.BlockSize}}})
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/blocks", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Blocks()) })
	mux.HandleFunc("GET /admin/faults", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, s.Faults()) })
	mux.HandleFunc("POST /admin/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Faults
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeError(w, 400, "invalid faults: "+err.Error())
			return
		}
		if f.DropProb < 0 || f.DropProb > 1 || f.ErrorProb < 0 || f.ErrorProb > 1 || f.DropEvents < 0 ||
			f.DuplicateEvents < 0 || f.ErrorNext < 0 || f.FailMidStreamNext < 0 || f.DelayEventsMs < 0 || f.SlowMs < 0 ||
			(f.ErrorStatus != 0 && (f.ErrorStatus < 400 || f.ErrorStatus > 599)) {
			writeError(w, 400, "invalid faults: probabilities in [0,1], counts and delays >= 0, error_status 4xx/5xx")
			return
		}
		s.SetFaults(f)
		writeJSON(w, 200, f)
	})
	mux.HandleFunc("POST /admin/restart", func(w http.ResponseWriter, r *http.Request) {
		if err := s.Restart(r.Context()); err != nil {
			writeError(w, 500, "restart: "+err.Error())
			return
		}
		writeJSON(w, 200, map[string]any{"restarted": true, "events": s.EventsAddr(), "replay": s.ReplayAddr()})
	})
	return mux
}

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
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// promptTokens turns the request into token ids.
func (c *completionRequest) promptTokens(chat bool) ([]uint32, error) {
	if chat {
		if len(c.Messages) == 0 {
			return nil, errors.New("messages: required")
		}
		var toks []uint32
		for i, m := range c.Messages {
			text, err := contentText(m.Content)
			if err != nil {
				return nil, fmt.Errorf("messages[%d].content: %v", i, err)
			}
			toks = append(toks, Tokenize(m.Role+": "+text)...)
		}
		return toks, nil
	}
	if len(c.Prompt) == 0 {
		return nil, errors.New("prompt: required")
	}
	var text string
	if err := json.Unmarshal(c.Prompt, &text); err == nil {
		return Tokenize(text), nil
	}
	var ids []int64
	if err := json.Unmarshal(c.Prompt, &ids); err != nil {
		return nil, errors.New("prompt: want a string or an array of token ids")
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id > 1<<32-1 {
			return nil, fmt.Errorf("prompt[%d]: token id %d out of range", i, id)
		}
		out[i] = uint32(id)
	}
	return out, nil
}

// contentText accepts a string or OpenAI's content parts ([{type:"text", text}]).
func contentText(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("want a string or content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
			b.WriteByte(' ')
		}
	}
	return b.String(), nil
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

func (s *Server) complete(w http.ResponseWriter, r *http.Request, chat bool) {
	var req completionRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil {
		writeError(w, 400, "invalid JSON body: "+err.Error())
		return
	}
	if f := s.Faults(); f.SlowMs > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(time.Duration(f.SlowMs * float64(time.Millisecond))):
		}
	}
	if status, fail := s.injectError(); fail {
		writeError(w, status, "injected fault")
		return
	}
	toks, err := req.promptTokens(chat)
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
	model := req.Model
	if model == "" {
		model = s.cfg.Model
	} else if model != s.cfg.Model {
		writeError(w, 404, fmt.Sprintf("the model `%s` does not exist", model))
		return
	}
	q, err := s.submit(toks, maxTok)
	if err != nil {
		if errors.Is(err, engine.ErrTooLong) {
			writeError(w, 400, "prompt too long: "+err.Error())
		} else {
			writeError(w, 500, err.Error())
		}
		return
	}
	id := fmt.Sprintf("cmpl-%s-%d", s.cfg.Name, q.id)
	object := "text_completion"
	if chat {
		id, object = fmt.Sprintf("chatcmpl-%s-%d", s.cfg.Name, q.id), "chat.completion"
	}
	created := time.Now().Unix()
	usage := func() map[string]any {
		return map[string]any{"prompt_tokens": len(toks), "completion_tokens": maxTok, "total_tokens": len(toks) + maxTok,
			"prompt_tokens_details": map[string]any{"cached_tokens": q.cached}}
	}
	choice := func(text string, finish any) map[string]any {
		if chat {
			if req.Stream {
				return map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": text}, "finish_reason": finish}
			}
			return map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": finish}
		}
		return map[string]any{"index": 0, "text": text, "finish_reason": finish, "logprobs": nil}
	}
	if !req.Stream {
		select {
		case <-q.done:
		case <-r.Context().Done():
			return
		}
		if q.err != nil {
			writeError(w, 503, q.err.Error())
			return
		}
		writeJSON(w, 200, map[string]any{"id": id, "object": object, "created": created, "model": model,
			"choices": []any{choice(strings.TrimPrefix(outputText(toks, 0, maxTok), " "), "length")}, "usage": usage()})
		return
	}
	if chat {
		object = "chat.completion.chunk"
	}
	select {
	case <-q.first:
	case <-r.Context().Done():
		return
	}
	if q.err != nil {
		writeError(w, 503, q.err.Error())
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
	chunk := func(text string, finish any) map[string]any {
		return map[string]any{"id": id, "object": object, "created": created, "model": model, "choices": []any{choice(text, finish)}}
	}
	var firstFinish any
	if maxTok == 1 {
		<-q.done
		firstFinish = "length"
	}
	if !send(chunk(strings.TrimPrefix(outputText(toks, 0, 1), " "), firstFinish)) {
		return
	}
	if s.injectMidStreamFailure() {
		panic(http.ErrAbortHandler) // net/http closes the connection without ending the chunked body
	}
	if maxTok > 1 {
		select {
		case <-q.done:
		case <-r.Context().Done():
			return
		}
		if q.err != nil {
			send(map[string]any{"error": map[string]any{"message": q.err.Error(), "type": "ServiceUnavailable", "code": 503}})
			return
		}
		for i := 1; i < maxTok; i++ {
			var fin any
			if i == maxTok-1 {
				fin = "length"
			}
			if !send(chunk(outputText(toks, i, i+1), fin)) {
				return
			}
		}
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(map[string]any{"id": id, "object": object, "created": created, "model": model, "choices": []any{}, "usage": usage()})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"error":{"message":"encode"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
	w.Write([]byte("\n"))
}

// writeError writes vLLM's (OpenAI's) error shape.
func writeError(w http.ResponseWriter, status int, msg string) {
	typ := "BadRequestError"
	switch {
	case status == 404:
		typ = "NotFoundError"
	case status >= 500:
		typ = "ServiceUnavailableError"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
}
