package mock

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// maxBody bounds a request body, bytes.
const maxBody = 64 << 20

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
	mux.HandleFunc("POST /tokenize", s.tokenize)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"object": "list", "data": []any{map[string]any{
			"id": s.cfg.Model, "object": "model", "owned_by": "kvrouter-mock", "root": s.cfg.Model,
			"max_model_len": s.maxModelLen()}}})
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
		if err := f.check(); err != nil {
			writeError(w, 400, "invalid faults: "+err.Error())
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

// maxModelLen is the longest sequence the engine accepts, tokens: its whole KV cache.
func (s *Server) maxModelLen() int { return s.cfg.Engine.NumBlocks * s.cfg.Engine.BlockSize }

// servedModel resolves a request's model name: "" means the served model; another name is a 404
// (written here; ok false).
func (s *Server) servedModel(w http.ResponseWriter, model string) (string, bool) {
	if model == "" {
		return s.cfg.Model, true
	}
	if model != s.cfg.Model {
		writeError(w, 404, fmt.Sprintf("the model `%s` does not exist", model))
		return "", false
	}
	return model, true
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
