// Package gateway is kvrouter's OpenAI-compatible front door (SPEC §7.2): POST /v1/completions,
// POST /v1/chat/completions and GET /v1/models. A request's model picks the pool, its prompt becomes token
// ids (Tokenizer), the router books the best worker, and the body goes to that worker unchanged; the answer
// comes back as it is, a stream chunk by chunk. The gateway releases the booking when the answer ends, the
// worker fails or the client leaves, retries connect failures and 429/503 answers on another worker, and
// reports each forward's outcome to the shared worker health. It is transport-free: the fasthttp server
// and the Lambda streaming handler adapt Request and Sink.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/gateway/prompt"
	"github.com/kvrouter/kvrouter/statestore"
)

// The gateway's endpoints.
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"
	PathModels          = "/v1/models"
)

// Handles reports whether a path is one of the gateway's endpoints.
func Handles(path string) bool {
	return path == PathCompletions || path == PathChatCompletions || path == PathModels
}

// AuthorizationHeader carries the bearer token Options.Authorize checks.
const AuthorizationHeader = "Authorization"

// Response headers the gateway adds to every forwarded answer (SPEC §7.2).
const (
	HeaderRequestID     = "X-Kvrouter-Request-Id"
	HeaderWorker        = "X-Kvrouter-Worker"
	HeaderOverlapBlocks = "X-Kvrouter-Overlap-Blocks"
	// HeaderOverlap is "unknown" when the prompt's tokens were unknown and the request was routed by load
	// only.
	HeaderOverlap = "X-Kvrouter-Overlap"
)

// sessionHeaders carry the session id (as on POST /v1/route). The body's "user" field is not used: it
// names an end user, who may hold many unrelated conversations at once.
var sessionHeaders = []string{"X-Session-ID", "X-Dynamo-Session-ID"}

// Gateway serves the OpenAI-compatible endpoints over a router. Safe for concurrent use.
type Gateway struct {
	rt     *core.Router
	opts   Options
	models *modelCache
	ups    *upstreams
	log    *slog.Logger
	m      *Metrics
}

// New returns a gateway over a router. It does no I/O.
func New(rt *core.Router, opts Options) (*Gateway, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.Tokenizer == nil {
		r, err := prompt.NewResolver(prompt.Options{})
		if err != nil {
			return nil, err
		}
		opts.Tokenizer = r
	}
	return &Gateway{rt: rt, opts: opts, models: newModelCache(rt, opts.ModelCacheTTL), ups: newUpstreams(opts),
		log: opts.Logger, m: opts.Metrics}, nil
}

// Response is a gateway answer whose status and headers are known. Either Body is the whole body, or the
// body streams from the worker: then the caller sends the head and calls Stream exactly once (or Abort when
// it cannot send anything). After sending, the caller calls Finish, which releases the request's load and
// reports the worker's health; Finish may run on another goroutine, so a server can end the response first
// (a Lambda calls it before returning, since it may be frozen afterwards).
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	fl     *flight
	stream bool
}

// Streaming reports whether the body is still to be streamed with Stream.
func (r *Response) Streaming() bool { return r.stream }

// ChunkWriter receives a streamed body. Write sends one chunk to the client and flushes it; it must not
// keep p. An error means the client is gone.
type ChunkWriter interface {
	Write(p []byte) error
}

// Stream passes the worker's stream to w chunk by chunk. It returns when the stream ended, the worker
// failed (the client then gets an SSE error event; the load is released at once) or w failed (the worker
// connection is closed). Call Finish afterwards.
func (r *Response) Stream(w ChunkWriter) {
	if r.stream {
		r.fl.stream(w)
	}
}

// Finish ends the request's bookkeeping: done (the load is released), and the health report of a
// successful forward. Idempotent; a no-op for answers that booked nothing or released already.
func (r *Response) Finish() {
	if r.fl != nil {
		r.fl.finish()
	}
}

// Abort releases an answer that will not be sent (the client left before the head went out).
func (r *Response) Abort() {
	if r.stream {
		r.fl.abort()
		return
	}
	r.Finish()
}

// Serve answers one request on a Sink: the transport-neutral entry point (the Lambda handler's). The load
// is released before Serve returns.
func (g *Gateway) Serve(ctx context.Context, req Request, sink Sink) {
	r := g.Begin(ctx, req)
	if err := sink.Start(r.Status, r.Header); err != nil {
		r.Abort()
		return
	}
	if r.Streaming() {
		r.Stream(sink)
	} else if len(r.Body) > 0 {
		_ = sink.Write(r.Body)
	}
	r.Finish()
}

// Begin routes and forwards a request up to the worker's answer head, retrying on another worker when
// SPEC §7.2 allows it. The returned Response is complete unless Streaming.
func (g *Gateway) Begin(ctx context.Context, req Request) *Response {
	start := time.Now()
	if g.opts.Authorize != nil {
		authz := ""
		if req.Header != nil {
			authz = req.Header(AuthorizationHeader)
		}
		if status, code, msg := g.opts.Authorize(authz); status != 0 {
			r := errorResponse(status, typeInvalidRequest, code, msg)
			if status == http.StatusUnauthorized {
				r.Header.Set("WWW-Authenticate", "Bearer")
			}
			return g.done("", r)
		}
	}
	var kind prompt.Kind
	switch req.Path {
	case PathModels:
		if req.Method != http.MethodGet {
			return g.done("", methodNotAllowed(req, http.MethodGet))
		}
		sctx, cancel := context.WithTimeout(ctx, g.opts.StoreTimeout)
		defer cancel()
		return g.done("", g.models.listResponse(sctx))
	case PathCompletions:
		kind = prompt.Completion
	case PathChatCompletions:
		kind = prompt.Chat
	default:
		return g.done("", errorResponse(http.StatusNotFound, typeNotFound, CodeNotFound, "no gateway endpoint "+req.Path))
	}
	if req.Method != http.MethodPost {
		return g.done("", methodNotAllowed(req, http.MethodPost))
	}
	return g.proxy(ctx, req, kind, start)
}

// done records a complete answer's metrics and returns it.
func (g *Gateway) done(pool string, r *Response) *Response {
	if !r.Streaming() {
		g.m.request(pool, r.Status)
	}
	return r
}

func methodNotAllowed(req Request, allow string) *Response {
	r := errorResponse(http.StatusMethodNotAllowed, typeInvalidRequest, CodeMethodNotAllowed,
		fmt.Sprintf("%s %s: use %s", req.Method, req.Path, allow))
	r.Header.Set("Allow", allow)
	return r
}

// proxy resolves the pool and tokens, then routes and forwards with retries.
func (g *Gateway) proxy(ctx context.Context, req Request, kind prompt.Kind, start time.Time) *Response {
	model, found, err := modelField(req.Body)
	if err != nil {
		return g.done("", errorResponse(http.StatusBadRequest, typeInvalidRequest, "invalid_argument", "request body: "+err.Error()))
	}
	if !found || model == "" {
		return g.done("", errorResponse(http.StatusNotFound, typeNotFound, CodeModelNotFound,
			`the request names no "model"; GET /v1/models lists the served models`))
	}
	sctx, cancel := context.WithTimeout(ctx, g.opts.StoreTimeout)
	pe, ok, err := g.models.pool(sctx, model)
	cancel()
	if err != nil {
		return g.done("", storeErrorResponse(err))
	}
	if !ok {
		return g.done("", errorResponse(http.StatusNotFound, typeNotFound, CodeModelNotFound,
			fmt.Sprintf("the model `%s` does not exist; GET /v1/models lists the served models", model)))
	}
	in := core.RouteInput{Pool: pe.name}
	for _, h := range sessionHeaders {
		if v := header(req, h); v != "" {
			in.SessionID = v
			break
		}
	}
	if in.SessionID != "" {
		if err := statestore.CheckID("session id header", in.SessionID); err != nil {
			return g.done(pe.name, storeErrorResponse(err))
		}
	}
	toks, err := g.tokens(ctx, pe, kind, req.Body)
	if err != nil {
		return g.done(pe.name, storeErrorResponse(err))
	}
	if toks.Body != nil {
		req.Body = toks.Body // the images' uuids assigned by the router (docs/API.md)
	}
	if toks.Known {
		in.TokenIDs, in.MMItems = toks.Tokens, toks.MMItems
	} else {
		// Load-only routing still books the prompt's prefill load: estimated at 4 bytes of body per token.
		isl := int64(len(req.Body) / 4)
		in.ISL = &isl
	}
	f := &flight{g: g, pool: pe.name, start: start, known: toks.Known,
		leaseTTL: time.Duration(pe.cfg.LeaseTTLMs) * time.Millisecond}
	return f.run(ctx, req, in)
}

// tokens asks the Tokenizer. A bad body (prompt.ErrBadRequest) is the client's 400; any other failure
// (a template the engine-less renderer cannot run, a tokenize endpoint down, a tokenizer file missing)
// routes by load only: tokens make routing better, they must not make the gateway fail.
func (g *Gateway) tokens(ctx context.Context, pe poolEntry, kind prompt.Kind, body []byte) (prompt.Result, error) {
	engineURL := ""
	if pe.cfg.TokenizeMode() == statestore.TokenizeEngine {
		sctx, cancel := context.WithTimeout(ctx, g.opts.StoreTimeout)
		u, err := g.models.engineURL(sctx, pe.name)
		cancel()
		if err != nil {
			g.log.Warn("gateway: no worker to tokenize on; routing by load only", "pool", pe.name, "err", err)
			return prompt.Result{Source: prompt.SourceNone}, nil
		}
		engineURL = u
	}
	res, err := g.opts.Tokenizer.Tokens(ctx, prompt.Request{Pool: pe.name, Config: pe.cfg, Kind: kind, Body: body, EngineURL: engineURL})
	if err != nil {
		if errors.Is(err, prompt.ErrBadRequest) {
			return res, fmt.Errorf("%w: %v", statestore.ErrInvalid, err)
		}
		g.log.Warn("gateway: no tokens; routing by load only", "pool", pe.name, "err", err)
		return prompt.Result{Source: prompt.SourceNone, Body: res.Body}, nil
	}
	return res, nil
}

func header(req Request, name string) string {
	if req.Header == nil {
		return ""
	}
	return req.Header(name)
}
