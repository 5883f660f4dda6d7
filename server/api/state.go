package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// requestAck is the answer of prefill_done and done.
type requestAck struct {
	RequestID string `json:"request_id"`
	// Found is false when no lease existed (already ended, expired, or never booked): still a success.
	Found bool `json:"found"`
}

func (a *API) prefillDone(ctx context.Context, req *Request, p []string) Response {
	return a.endRequest(ctx, req, p[0], false)
}

func (a *API) done(ctx context.Context, req *Request, p []string) Response {
	return a.endRequest(ctx, req, p[0], true)
}

func (a *API) endRequest(ctx context.Context, req *Request, id string, done bool) Response {
	if err := statestore.CheckID("request_id", id); err != nil {
		return a.fromError(err)
	}
	pool := req.query("pool") // "" searches every pool
	var found bool
	var err error
	if done {
		found, err = a.rt.Done(ctx, pool, id)
	} else {
		found, err = a.rt.PrefillDone(ctx, pool, id)
	}
	if err != nil {
		return a.fromError(err)
	}
	return jsonResponse(http.StatusOK, requestAck{RequestID: id, Found: found})
}

// poolParam returns the ?pool= parameter, or the default pool.
func poolParam(req *Request) (string, error) {
	p := req.query("pool")
	if p == "" {
		return core.DefaultPool, nil
	}
	return p, statestore.CheckID("pool", p)
}

func (a *API) putWorker(ctx context.Context, req *Request, p []string) Response {
	var wi core.WorkerInput
	if err := decodeStrict(req.Body, "worker", &wi); err != nil {
		return a.fromError(err)
	}
	id := p[0]
	if wi.WorkerID != "" && string(wi.WorkerID) != id {
		return badRequest("worker_id %q in the body differs from %q in the path", string(wi.WorkerID), id)
	}
	wi.WorkerID = core.FlexString(id)
	pool, err := poolParam(req)
	if err != nil {
		return a.fromError(err)
	}
	if wi.Pool != "" {
		if req.query("pool") != "" && wi.Pool != pool {
			return badRequest("pool %q in the body differs from ?pool=%s", wi.Pool, pool)
		}
		pool = wi.Pool
	}
	spec := wi.Spec()
	if spec.URL == "" {
		return badRequest("url is required: the address /v1/route returns for this worker")
	}
	if err := spec.Validate(); err != nil {
		return a.fromError(err)
	}
	if err := a.rt.PutWorker(ctx, pool, spec, wi.BlockSize); err != nil {
		return a.fromError(err)
	}
	return jsonResponse(http.StatusOK, map[string]any{"pool": pool, "worker": spec})
}

func (a *API) deleteWorker(ctx context.Context, req *Request, p []string) Response {
	pool, err := poolParam(req)
	if err != nil {
		return a.fromError(err)
	}
	if err := statestore.CheckID("worker_id", p[0]); err != nil {
		return a.fromError(err)
	}
	if err := a.rt.RemoveWorker(ctx, pool, p[0]); err != nil {
		return a.fromError(err)
	}
	return jsonResponse(http.StatusOK, map[string]string{"pool": pool, "removed": p[0]})
}

func (a *API) listWorkers(ctx context.Context, req *Request, _ []string) Response {
	pool, err := poolParam(req)
	if err != nil {
		return a.fromError(err)
	}
	q := statestore.WorkersQuery{After: req.query("after")}
	if v := req.query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > statestore.MaxWorkersPage {
			return badRequest("limit %q must be an integer in [1, %d]", v, statestore.MaxWorkersPage)
		}
		q.Limit = n
	}
	if q.After != "" {
		if err := statestore.CheckID("after", q.After); err != nil {
			return a.fromError(err)
		}
	}
	pg, err := a.rt.ListWorkers(ctx, pool, q)
	if err != nil {
		return a.fromError(err)
	}
	if pg.Workers == nil {
		pg.Workers = []statestore.WorkerInfo{}
	}
	// next: the cursor of the following page (pass it as ?after=), "" on the last page; reclaim_pending_slots:
	// the pool's index incarnations still being deleted (statestore.WorkerPage.ReclaimPending)
	return jsonResponse(http.StatusOK, map[string]any{"pool": pool, "workers": pg.Workers, "next": pg.Next,
		"reclaim_pending_slots": pg.ReclaimPending})
}

func (a *API) listPools(ctx context.Context, _ *Request, _ []string) Response {
	ps, err := a.rt.Pools(ctx)
	if err != nil {
		return a.fromError(err)
	}
	if ps == nil {
		ps = []statestore.PoolInfo{}
	}
	return jsonResponse(http.StatusOK, map[string]any{"pools": ps})
}

func (a *API) getPool(ctx context.Context, _ *Request, p []string) Response {
	ps, err := a.rt.Pools(ctx)
	if err != nil {
		return a.fromError(err)
	}
	for _, pi := range ps {
		if pi.Name == p[0] {
			return jsonResponse(http.StatusOK, pi)
		}
	}
	return a.fromError(fmt.Errorf("%w: %q", statestore.ErrUnknownPool, p[0]))
}

// putPool creates a pool or updates its knobs: the body's knobs go on top of the pool's current config
// (or the defaults for a new pool); a new pool needs block_size.
func (a *API) putPool(ctx context.Context, req *Request, p []string) Response {
	name := p[0]
	if err := statestore.CheckID("pool", name); err != nil {
		return a.fromError(err)
	}
	if err := decodeStrict(req.Body, "pool config", &statestore.PoolConfig{}); err != nil {
		return a.fromError(err)
	}
	base, err := a.rt.Store().GetPool(ctx, name)
	if errors.Is(err, statestore.ErrUnknownPool) {
		base, err = statestore.DefaultPoolConfig(0), nil
	}
	if err != nil {
		return a.fromError(err)
	}
	cfg, err := core.ParsePoolConfig(base, req.Body)
	if err != nil {
		return a.fromError(err)
	}
	if err := a.rt.PutPool(ctx, name, cfg); err != nil {
		return a.fromError(err)
	}
	return jsonResponse(http.StatusOK, map[string]any{"pool": name, "config": cfg})
}

func (a *API) healthz(context.Context, *Request, []string) Response {
	return jsonResponse(http.StatusOK, map[string]string{"status": "ok"})
}

func (a *API) readyz(ctx context.Context, _ *Request, _ []string) Response {
	ready := a.opts.Ready
	if ready == nil {
		ready = a.rt.Store().Ping
	}
	if err := ready(ctx); err != nil {
		return errorResponse(http.StatusServiceUnavailable, "store_unavailable",
			fmt.Sprintf("state store %s not ready: %v", a.rt.Store().Name(), err))
	}
	return jsonResponse(http.StatusOK, map[string]string{"status": "ready", "store": a.rt.Store().Name()})
}
