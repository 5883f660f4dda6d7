package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// Session id headers (SPEC §7): used when the body gives no session_id.
var sessionHeaders = []string{"X-Session-ID", "X-Dynamo-Session-ID"}

// decodeRoute decodes a route/explain body, fills the session id from headers and tokenizes a text
// prompt. It returns the input and the time spent tokenizing.
func (a *API) decodeRoute(req *Request) (core.RouteInput, time.Duration, error) {
	var body routeBody
	if err := decodeStrict(req.Body, "route request", &body); err != nil {
		return core.RouteInput{}, 0, err
	}
	in, err := body.input()
	if err != nil {
		return in, 0, err
	}
	if in.SessionID == "" {
		for _, h := range sessionHeaders {
			if v := req.header(h); v != "" {
				in.SessionID = v
				break
			}
		}
	}
	if in.SessionID != "" {
		if err := statestore.CheckID("session_id", in.SessionID); err != nil {
			return in, 0, err
		}
	}
	if in.Prompt == "" {
		return in, 0, nil
	}
	if len(in.TokenIDs) > 0 || len(in.LocalHashes) > 0 {
		return in, 0, fmt.Errorf("%w: give prompt, token_ids or local_hashes, not several", statestore.ErrInvalid)
	}
	if a.opts.Tokenizer == nil {
		return in, 0, fmt.Errorf("%w: a text prompt needs a tokenizer, and none is configured (start the router with --tokenizer PATH/tokenizer.json, or send token_ids)", statestore.ErrInvalid)
	}
	t0 := time.Now()
	ids, err := a.opts.Tokenizer.Encode(in.Prompt)
	took := time.Since(t0)
	if err != nil {
		return in, took, fmt.Errorf("%w: prompt: %v", statestore.ErrInvalid, err)
	}
	in.TokenIDs, in.Prompt = ids, ""
	return in, took, nil
}

func (a *API) route(ctx context.Context, req *Request, _ []string) Response {
	return a.decide(ctx, req, false)
}

func (a *API) explain(ctx context.Context, req *Request, _ []string) Response {
	return a.decide(ctx, req, true)
}

// decide runs one route or explain call, with its span, metrics and debug log line.
func (a *API) decide(ctx context.Context, req *Request, explain bool) Response {
	kind := "route"
	if explain {
		kind = "explain"
	}
	start := time.Now()
	in, tokenize, err := a.decodeRoute(req)
	if err != nil {
		a.opts.Metrics.observeDecision(kind, "", statestore.ErrorCode(err), 0, 0, 0, nil)
		return a.fromError(err)
	}
	ctx, span := a.tr.Start(ctx, "kvrouter."+kind, trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	var storeTime time.Duration
	ctx = withStoreTimer(ctx, &storeTime)
	var resp Response
	var d *statestore.Decision
	outcome := "ok"
	if explain {
		ex, e := a.rt.Explain(ctx, in)
		err = e
		if err == nil {
			d = ex.Decision
			if ex.Error != nil {
				outcome = ex.Error.Code // nothing eligible: still a 200 with the reasons
			}
			resp = jsonResponse(http.StatusOK, ex)
		}
	} else {
		dec, e := a.rt.Route(ctx, in)
		err = e
		if err == nil {
			d = &dec
			resp = jsonResponse(http.StatusOK, dec)
		}
	}
	total := time.Since(start)
	pool := in.Pool
	if pool == "" {
		pool = core.DefaultPool
	}
	span.SetAttributes(attribute.String("kvrouter.pool", pool))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, statestore.ErrorCode(err))
		a.opts.Metrics.observeDecision(kind, pool, statestore.ErrorCode(err), total, tokenize, storeTime, nil)
		a.log.Debug("decision", "kind", kind, "pool", pool, "request_id", in.RequestID, "error", err.Error(),
			"total_us", total.Microseconds(), "store_us", storeTime.Microseconds())
		return a.fromError(err)
	}
	if d != nil {
		span.SetAttributes(
			attribute.String("kvrouter.request_id", d.RequestID),
			attribute.String("kvrouter.worker_id", d.WorkerID),
			attribute.Int("kvrouter.dp_rank", d.DPRank),
			attribute.Int("kvrouter.overlap_blocks", d.OverlapBlocks),
			attribute.Int64("kvrouter.required_blocks", d.RequiredBlocks),
			attribute.Float64("kvrouter.cost", d.Cost),
			attribute.Bool("kvrouter.session_hit", d.SessionHit),
		)
		a.log.Debug("decision", "kind", kind, "pool", pool, "request_id", d.RequestID, "worker_id", d.WorkerID,
			"dp_rank", d.DPRank, "overlap_blocks", d.OverlapBlocks, "required_blocks", d.RequiredBlocks,
			"cost", d.Cost, "session_hit", d.SessionHit, "total_us", total.Microseconds(),
			"store_us", storeTime.Microseconds())
	}
	a.opts.Metrics.observeDecision(kind, pool, outcome, total, tokenize, storeTime, d)
	return resp
}
