package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// eventsResult is the answer of POST /v1/events.
type eventsResult struct {
	// Received is the number of events in the body.
	Received int `json:"received"`
	// Result counts what the store did with the valid events.
	Result statestore.ApplyResult `json:"result"`
	// Invalid is the number of events rejected before reaching the store (see Errors).
	Invalid int `json:"invalid"`
	// Errors lists the first rejected events (index in the body, reason); at most maxEventErrors.
	Errors []core.EventError `json:"errors,omitempty"`
}

const maxEventErrors = 20

// splitEvents cuts a body into raw events: a JSON array, or JSON lines (one object per line, blank lines
// skipped). A body that is neither is an error.
func splitEvents(body []byte, max int) ([]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: events: empty body, want a JSON array or JSON lines", statestore.ErrInvalid)
	}
	if trimmed[0] == '[' {
		var raws []json.RawMessage
		if err := json.Unmarshal(trimmed, &raws); err != nil {
			return nil, fmt.Errorf("%w: events: %s", statestore.ErrInvalid, describeJSONError(err))
		}
		if len(raws) > max {
			return nil, fmt.Errorf("%w: events: %d events in one request, max %d", statestore.ErrInvalid, len(raws), max)
		}
		return raws, nil
	}
	var raws []json.RawMessage
	for n, line := range bytes.Split(trimmed, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if !json.Valid(line) {
			var v any
			err := json.Unmarshal(line, &v)
			return nil, fmt.Errorf("%w: events: line %d: %s", statestore.ErrInvalid, n+1, describeJSONError(err))
		}
		if len(raws) == max {
			return nil, fmt.Errorf("%w: events: more than %d events in one request", statestore.ErrInvalid, max)
		}
		raws = append(raws, json.RawMessage(line))
	}
	return raws, nil
}

func (a *API) events(ctx context.Context, req *Request, _ []string) Response {
	raws, err := splitEvents(req.Body, a.opts.MaxEvents)
	if err != nil {
		a.opts.Metrics.observeEventsRejected(1)
		return a.fromError(err)
	}
	pool := req.query("pool")
	if pool != "" {
		if err := statestore.CheckID("pool", pool); err != nil {
			return a.fromError(err)
		}
	}
	res := eventsResult{Received: len(raws)}
	evs := make([]core.RouterEvent, 0, len(raws))
	idx := make([]int, 0, len(raws)) // body index of each decoded event
	for i, raw := range raws {
		var ev core.RouterEvent
		if err := decodeStrict(raw, fmt.Sprintf("event %d", i), &ev); err != nil {
			res.addError(i, err.Error())
			continue
		}
		if ev.Pool == "" {
			ev.Pool = pool
		}
		evs = append(evs, ev)
		idx = append(idx, i)
	}
	a.opts.Metrics.observeEventTypes(evs)
	applied, bad, err := a.rt.ApplyRouterEvents(ctx, evs)
	for _, b := range bad {
		res.addError(idx[b.Index], b.Error)
	}
	res.Result = applied
	a.opts.Metrics.observeEventsApplied(applied, res.Invalid)
	if applied.Restarts > 0 {
		// A new epoch, or an event id far beyond the last (Limits.MaxEventIDJump): ranks were cleared.
		a.log.Warn("events: worker restart detected, its index was cleared", "restarts", applied.Restarts,
			"worker", evs[0].WorkerID)
	}
	if err != nil {
		return a.fromError(err)
	}
	if res.Invalid > 0 && res.Invalid == res.Received {
		first := res.Errors[0]
		return errorResponse(http.StatusBadRequest, "invalid_argument",
			fmt.Sprintf("events: all %d events rejected; first (index %d): %s", res.Invalid, first.Index, first.Error))
	}
	return jsonResponse(http.StatusOK, res)
}

func (r *eventsResult) addError(i int, msg string) {
	r.Invalid++
	if len(r.Errors) < maxEventErrors {
		r.Errors = append(r.Errors, core.EventError{Index: i, Error: msg})
	}
}
