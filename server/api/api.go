// Package api is kvrouter's transport-free HTTP API (SPEC §7): it turns a request (method, path, query,
// headers, body) into calls on a core.Router and renders the JSON answer with its status code. The
// fasthttp server (package server) and the AWS Lambda handlers (package functions) both go through it,
// so they decode, validate, decide and fail identically. It holds no routing state.
package api

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/core"
)

// Tokenizer turns prompt text into the engine's token ids (tokenizer.Tokenizer satisfies it).
type Tokenizer interface {
	Encode(text string) ([]uint32, error)
}

// Options configure an API. The zero value is valid.
type Options struct {
	// Tokenizer encodes "prompt" text. Default nil: a route with a text prompt is a 400.
	Tokenizer Tokenizer
	// Metrics records decisions, events and per-endpoint counts. Default nil: nothing is recorded.
	Metrics *Metrics
	// Tracer starts one span per decision. Default nil: otel's global tracer (a no-op unless a
	// tracer provider was installed).
	Tracer trace.Tracer
	// Logger gets one debug line per decision and one warning per internal error. Default slog.Default().
	Logger *slog.Logger
	// MaxEvents bounds the events of one POST /v1/events, count. Default 100000.
	MaxEvents int
	// Timeout bounds the state-store work of one request. Default 0: the caller's context only.
	Timeout time.Duration
	// Ready is GET /readyz's check (nil error: ready). Default nil: the store's Ping. `serve` and
	// `ingest` also require their configured pools to exist (SPEC §8 "Losing Redis").
	Ready func(ctx context.Context) error
	// Auth, when set, requires a bearer token of each endpoint's scope (ScopeOf; SPEC §7.3): 401
	// without a known token, 403 with one of too small a scope. Default nil: no access control.
	Auth *Tokens
}

// API answers requests against one router. Safe for concurrent use.
type API struct {
	rt   *core.Router
	opts Options
	log  *slog.Logger
	tr   trace.Tracer
}

// New returns an API over a router.
func New(rt *core.Router, opts Options) *API {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Tracer == nil {
		opts.Tracer = otel.Tracer("github.com/kvrouter/kvrouter/server/api")
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = 100000
	}
	return &API{rt: rt, opts: opts, log: opts.Logger, tr: opts.Tracer}
}

// Router returns the API's router.
func (a *API) Router() *core.Router { return a.rt }

// Request is one API call, independent of the transport.
type Request struct {
	Method string
	// RawPath is the path as sent, still percent-encoded (segments are unescaped one by one, so ids may
	// hold '/' as %2F).
	RawPath string
	// Query returns a query parameter ("" when absent). Nil means no query.
	Query func(name string) string
	// Header returns a header value, case-insensitively ("" when absent). Nil means no headers.
	Header func(name string) string
	Body   []byte
}

func (r *Request) query(name string) string {
	if r.Query == nil {
		return ""
	}
	return r.Query(name)
}

func (r *Request) header(name string) string {
	if r.Header == nil {
		return ""
	}
	return r.Header(name)
}

// Response is the answer: a status code and a JSON body.
type Response struct {
	Status int
	Body   []byte
}

// ContentType is the media type of every response body.
const ContentType = "application/json"

// RetryAfterSeconds is the Retry-After of every 503: the store or every worker is unavailable for now
// (SPEC §8), and a client backing off a second gives a restarting Redis or a failover time.
const RetryAfterSeconds = "1"

// HeadersFor returns the response headers of an answer with this status: Content-Type, plus
// Retry-After on a 503 and WWW-Authenticate on a 401. Every transport sets them.
func HeadersFor(status int) map[string]string {
	h := map[string]string{"Content-Type": ContentType}
	switch status {
	case http.StatusServiceUnavailable:
		h["Retry-After"] = RetryAfterSeconds
	case http.StatusUnauthorized:
		h["WWW-Authenticate"] = "Bearer"
	}
	return h
}

// endpoint is one route of the API.
type endpoint struct {
	name    string // template, the metrics label
	methods map[string]func(a *API, ctx context.Context, req *Request, params []string) Response
}

// Do answers one request.
func (a *API) Do(ctx context.Context, req Request) Response {
	start := time.Now()
	if a.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.opts.Timeout)
		defer cancel()
	}
	var name string
	var resp Response
	if e := a.opts.Auth.Check(req.header("Authorization"), ScopeOf(req.RawPath)); e != nil {
		name, resp = Endpoint(req.RawPath), errorResponse(e.Status, e.Code, e.Msg)
	} else {
		name, resp = a.dispatch(ctx, &req)
	}
	a.opts.Metrics.observeHTTP(name, resp.Status, time.Since(start))
	return resp
}

// Endpoint returns the metrics name of the endpoint a path maps to ("unknown" if none).
func Endpoint(rawPath string) string {
	ep, _, ok := match(rawPath)
	if !ok {
		return "unknown"
	}
	return ep.name
}

func (a *API) dispatch(ctx context.Context, req *Request) (string, Response) {
	ep, params, ok := match(req.RawPath)
	if !ok {
		return "unknown", errorResponse(http.StatusNotFound, "not_found", "no such endpoint: "+truncate(req.RawPath, 200))
	}
	h, ok := ep.methods[req.Method]
	if !ok {
		allowed := make([]string, 0, len(ep.methods))
		for m := range ep.methods {
			allowed = append(allowed, m)
		}
		return ep.name, errorResponse(http.StatusMethodNotAllowed, "method_not_allowed",
			req.Method+" is not allowed on "+ep.name+" (allowed: "+strings.Join(sortStrings(allowed), ", ")+")")
	}
	return ep.name, h(a, ctx, req, params)
}

type handler = func(a *API, ctx context.Context, req *Request, params []string) Response

// routes: path segments; "*" matches one non-empty segment, passed to the handler in order.
var routes = []struct {
	segs []string
	ep   endpoint
}{
	{[]string{"v1", "route"}, endpoint{"/v1/route", map[string]handler{"POST": (*API).route}}},
	{[]string{"v1", "route", "explain"}, endpoint{"/v1/route/explain", map[string]handler{"POST": (*API).explain}}},
	{[]string{"v1", "requests", "*", "prefill_done"}, endpoint{"/v1/requests/{id}/prefill_done", map[string]handler{"POST": (*API).prefillDone}}},
	{[]string{"v1", "requests", "*", "done"}, endpoint{"/v1/requests/{id}/done", map[string]handler{"POST": (*API).done}}},
	{[]string{"v1", "events"}, endpoint{"/v1/events", map[string]handler{"POST": (*API).events}}},
	{[]string{"v1", "pools"}, endpoint{"/v1/pools", map[string]handler{"GET": (*API).listPools}}},
	{[]string{"v1", "pools", "*"}, endpoint{"/v1/pools/{pool}", map[string]handler{"PUT": (*API).putPool, "GET": (*API).getPool}}},
	{[]string{"v1", "workers"}, endpoint{"/v1/workers", map[string]handler{"GET": (*API).listWorkers}}},
	{[]string{"v1", "workers", "*"}, endpoint{"/v1/workers/{worker_id}", map[string]handler{"PUT": (*API).putWorker, "DELETE": (*API).deleteWorker}}},
	{[]string{"healthz"}, endpoint{"/healthz", map[string]handler{"GET": (*API).healthz, "HEAD": (*API).healthz}}},
	{[]string{"readyz"}, endpoint{"/readyz", map[string]handler{"GET": (*API).readyz, "HEAD": (*API).readyz}}},
}

func match(rawPath string) (endpoint, []string, bool) {
	p := strings.Trim(rawPath, "/")
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	segs := strings.Split(p, "/")
	for _, r := range routes {
		if len(r.segs) != len(segs) {
			continue
		}
		var params []string
		ok := true
		for i, s := range r.segs {
			if s == "*" {
				v, err := url.PathUnescape(segs[i])
				if err != nil || v == "" {
					ok = false
					break
				}
				params = append(params, v)
			} else if s != segs[i] {
				ok = false
				break
			}
		}
		if ok {
			return r.ep, params, true
		}
	}
	return endpoint{}, nil, false
}
