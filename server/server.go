// Package server is kvrouter's HTTP decision service (`kvrouter serve`, SPEC §7) on fasthttp: it reads
// requests, hands them to the transport-free api package and writes the answers; it also serves
// Prometheus /metrics and shuts down gracefully. Configuration (flags > env > YAML file > defaults) is
// in config.go, tracing setup in tracing.go.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/server/api"
)

// Options configure a Server. Every field is validated by New.
type Options struct {
	// MaxBodyBytes bounds a request body, bytes; larger bodies get 413. Default 8 MiB; range [1 KiB, 1 GiB].
	MaxBodyBytes int
	// ReadTimeout bounds reading one request (headers and body). Default 30 s; 0 is invalid.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response. Default 30 s; 0 is invalid.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections idle this long. Default 120 s.
	IdleTimeout time.Duration
	// ShutdownTimeout bounds draining in-flight requests on shutdown; then connections are closed.
	// Default 15 s.
	ShutdownTimeout time.Duration
	// Concurrency caps concurrent connections; 0 = fasthttp's default (256 k).
	Concurrency int
	// MaxHeaderBytes bounds the request line plus headers, bytes (fasthttp's per-connection read
	// buffer); larger requests get 431. Default 8 KiB; range [1 KiB, 1 MiB].
	MaxHeaderBytes int
	// MaxURIBytes bounds the request URI (path and query), bytes; longer ones get 414 (a URI too long
	// to fit in MaxHeaderBytes gets 431). Default 4 KiB; range [256, MaxHeaderBytes].
	MaxURIBytes int
	// Gatherer serves GET /metrics; nil = no /metrics endpoint (404).
	Gatherer prometheus.Gatherer
	// Logger receives server errors. Default slog.Default().
	Logger *slog.Logger
	// Gateway serves the OpenAI-compatible endpoints (SPEC §7.2); nil = they are 404. A streamed answer
	// has no whole-response write timeout: WriteTimeout bounds each chunk's write instead.
	Gateway *gateway.Gateway
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{MaxBodyBytes: 8 << 20, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		IdleTimeout: 120 * time.Second, ShutdownTimeout: 15 * time.Second, MaxHeaderBytes: 8 << 10, MaxURIBytes: 4 << 10}
}

// Validate names the first bad option.
func (o Options) Validate() error {
	switch {
	case o.MaxBodyBytes < 1<<10 || o.MaxBodyBytes > 1<<30:
		return fmt.Errorf("max-body-bytes must be in [1024, %d], got %d", 1<<30, o.MaxBodyBytes)
	case o.ReadTimeout <= 0:
		return fmt.Errorf("read-timeout must be > 0, got %s", o.ReadTimeout)
	case o.WriteTimeout <= 0:
		return fmt.Errorf("write-timeout must be > 0, got %s", o.WriteTimeout)
	case o.IdleTimeout < 0:
		return fmt.Errorf("idle-timeout must be >= 0, got %s", o.IdleTimeout)
	case o.ShutdownTimeout <= 0:
		return fmt.Errorf("shutdown-timeout must be > 0, got %s", o.ShutdownTimeout)
	case o.Concurrency < 0:
		return fmt.Errorf("concurrency must be >= 0, got %d", o.Concurrency)
	case o.MaxHeaderBytes < 1<<10 || o.MaxHeaderBytes > 1<<20:
		return fmt.Errorf("max-header-bytes must be in [1024, 1048576], got %d", o.MaxHeaderBytes)
	case o.MaxURIBytes < 256 || o.MaxURIBytes > o.MaxHeaderBytes:
		return fmt.Errorf("max-uri-bytes must be in [256, max-header-bytes], got %d", o.MaxURIBytes)
	}
	return nil
}

// Server serves an api.API over HTTP/1.1.
type Server struct {
	api     *api.API
	opts    Options
	fs      *fasthttp.Server
	metrics fasthttp.RequestHandler
	log     *slog.Logger
}

// New returns a server for a; it does not listen yet.
func New(a *api.API, opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{api: a, opts: opts, log: opts.Logger}
	if opts.Gatherer != nil {
		s.metrics = fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	}
	s.fs = &fasthttp.Server{
		Handler:                       s.handle,
		ErrorHandler:                  s.handleError,
		ExpectHandler:                 s.handleExpect,
		Name:                          "kvrouter",
		MaxRequestBodySize:            opts.MaxBodyBytes,
		ReadTimeout:                   opts.ReadTimeout,
		WriteTimeout:                  opts.WriteTimeout,
		IdleTimeout:                   opts.IdleTimeout,
		Concurrency:                   opts.Concurrency,
		ReadBufferSize:                opts.MaxHeaderBytes,
		DisablePreParseMultipartForm:  true,
		NoDefaultContentType:          true,
		DisableHeaderNamesNormalizing: false,
		CloseOnShutdown:               true,
		Logger:                        fasthttpLogger{opts.Logger},
	}
	return s, nil
}

type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	f.l.Debug("fasthttp", "msg", fmt.Sprintf(format, args...))
}

// Handler returns the fasthttp handler (for tests and embedding).
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	if n := len(ctx.RequestURI()); n > s.opts.MaxURIBytes {
		writeError(ctx, http.StatusRequestURITooLong, "uri_too_long",
			fmt.Sprintf("request URI of %d bytes is longer than %d", n, s.opts.MaxURIBytes))
		return
	}
	path := ctx.URI().PathOriginal()
	if s.metrics != nil && string(ctx.Path()) == "/metrics" && ctx.IsGet() {
		s.metrics(ctx)
		return
	}
	if s.opts.Gateway != nil && gateway.Handles(string(ctx.Path())) {
		s.serveGateway(ctx)
		return
	}
	req := api.Request{
		Method:  string(ctx.Method()),
		RawPath: string(path),
		Query: func(name string) string {
			return string(ctx.QueryArgs().Peek(name))
		},
		Header: func(name string) string { return string(ctx.Request.Header.Peek(name)) },
		Body:   ctx.PostBody(),
	}
	// Not ctx itself: fasthttp cancels it on shutdown, and in-flight requests must drain, not fail.
	resp := s.api.Do(context.Background(), req)
	ctx.SetStatusCode(resp.Status)
	for k, v := range api.HeadersFor(resp.Status) {
		ctx.Response.Header.Set(k, v)
	}
	ctx.SetBody(resp.Body)
}

// handleError answers requests fasthttp could not read: too large (413), timeouts, malformed HTTP.
func (s *Server) handleError(ctx *fasthttp.RequestCtx, err error) {
	status, code := http.StatusBadRequest, "bad_request"
	msg := "cannot read the request: " + err.Error()
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		status, code = http.StatusRequestEntityTooLarge, "body_too_large"
		msg = fmt.Sprintf("request body larger than %d bytes", s.opts.MaxBodyBytes)
	case isTimeout(err):
		status, code = http.StatusRequestTimeout, "timeout"
		msg = "timed out reading the request"
	case errors.As(err, new(*fasthttp.ErrSmallBuffer)):
		status, code = http.StatusRequestHeaderFieldsTooLarge, "headers_too_large"
		msg = fmt.Sprintf("request line and headers larger than %d bytes", s.opts.MaxHeaderBytes)
	}
	writeError(ctx, status, code, msg)
	ctx.SetConnectionClose()
}

// writeError writes the decision API's error shape.
func writeError(ctx *fasthttp.RequestCtx, status int, code, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType(api.ContentType)
	ctx.SetBodyString(fmt.Sprintf(`{"error":{"code":%q,"message":%q}}`, code, msg))
}

// handleExpect answers "Expect: 100-continue" requests whose declared body is too large with 413 before
// the client sends the body (without Expect, a client still writing a huge body may see the connection
// close before it reads the 413).
func (s *Server) handleExpect(ctx *fasthttp.RequestCtx) int {
	if n := ctx.Request.Header.ContentLength(); n > s.opts.MaxBodyBytes {
		ctx.SetContentType(api.ContentType)
		ctx.SetBodyString(fmt.Sprintf(`{"error":{"code":"body_too_large","message":"request body larger than %d bytes"}}`, s.opts.MaxBodyBytes))
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusContinue
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Serve answers on ln until ctx is cancelled, then stops accepting, drains in-flight requests for up to
// ShutdownTimeout and returns. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.fs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	err := s.fs.ShutdownWithContext(sctx)
	// fasthttp's Shutdown closes only the listeners its Serve has registered: when ctx ends before the
	// goroutine above reached s.fs.Serve, Shutdown finds none, returns at once, and Serve would then
	// accept forever (seen: TestListenRule hung, stopped right after listening on a loaded box). Closing ln
	// here ends Serve either way; fasthttp reports a closed listener as a clean stop (nil), and a second
	// Close only returns an error we drop.
	_ = ln.Close()
	if serr := <-errc; serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}
