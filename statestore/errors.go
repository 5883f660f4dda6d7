package statestore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors: expected outcomes, mapped by the HTTP layer to status codes.
var (
	ErrInvalid          = errors.New("invalid argument")        // 400
	ErrUnknownPool      = errors.New("unknown pool")            // 404
	ErrUnknownWorker    = errors.New("unknown worker")          // 404
	ErrConflict         = errors.New("conflict")                // 409
	ErrNoEligibleWorker = errors.New("no eligible worker")      // 503
	ErrUnavailable      = errors.New("state store unavailable") // 503
)

// Filter reasons, in the order they are checked (a candidate gets the first that applies): liveness,
// then the request's own scoping (allow-list, pin, exclusions), then the worker's shared health, then
// load. Health comes before load so that a worker both failing and busy is reported as unhealthy (the
// cause an operator can act on), and scoping before health because it is what the caller asked for.
const (
	ReasonNotLive    = "not_live"
	ReasonNotAllowed = "not_allowed"
	ReasonNotPinned  = "not_pinned"
	// ReasonExcluded: the caller excluded the worker for this request (a gateway retry after a failed
	// forward).
	ReasonExcluded = "excluded"
	// ReasonUnhealthy: forwards to the worker failed unhealthy_after times in a row and its back-off has
	// not ended, or another decision is probing it (SPEC §7.2; rules in health.go).
	ReasonUnhealthy   = "unhealthy"
	ReasonBusyPrefill = "busy_prefill"
	ReasonBusyDecode  = "busy_decode"
)

// FilterReasons lists the filter reasons in the order they are checked: the one table both stores and
// the Lua scripts follow (luascripts/knobs_gen.lua holds them as R_<NAME>, generated from this list by
// `go generate ./statestore`). A new reason is a constant above and an entry here.
func FilterReasons() []string {
	return []string{ReasonNotLive, ReasonNotAllowed, ReasonNotPinned, ReasonExcluded, ReasonUnhealthy, ReasonBusyPrefill, ReasonBusyDecode}
}

// NoEligibleError says why no candidate was left: the count of candidates per filter reason.
type NoEligibleError struct {
	Pool    string
	Reasons map[string]int
}

func (e *NoEligibleError) Error() string {
	if len(e.Reasons) == 0 {
		return fmt.Sprintf("no eligible worker in pool %q: no workers registered", e.Pool)
	}
	keys := make([]string, 0, len(e.Reasons))
	for k := range e.Reasons {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", e.Reasons[k], k)
	}
	return fmt.Sprintf("no eligible worker in pool %q: %s", e.Pool, strings.Join(parts, ", "))
}

func (e *NoEligibleError) Unwrap() error { return ErrNoEligibleWorker }

// ErrorCode maps an error to the API's error code string.
func ErrorCode(err error) string {
	switch {
	case errors.Is(err, ErrInvalid):
		return "invalid_argument"
	case errors.Is(err, ErrUnknownPool):
		return "unknown_pool"
	case errors.Is(err, ErrUnknownWorker):
		return "unknown_worker"
	case errors.Is(err, ErrLayoutMismatch):
		return "layout_mismatch"
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrNoEligibleWorker):
		return "no_eligible_worker"
	case errors.Is(err, ErrUnavailable):
		return "store_unavailable"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "internal"
}

// ErrLayoutMismatch: the pool was written by another key-layout version (SPEC §8); HTTP 409
// layout_mismatch. Errors carrying it are *LayoutMismatchError.
var ErrLayoutMismatch = errors.New("layout mismatch")

// LayoutMismatchError names both layout versions and the fix. It wraps ErrLayoutMismatch and
// ErrConflict (so the HTTP layer answers 409).
type LayoutMismatchError struct {
	Pool  string
	Found string // the pool's recorded version ("1": none recorded, written before versions existed)
	Want  string // this router's version (luascripts.Layout)
}

func (e *LayoutMismatchError) Error() string {
	return fmt.Sprintf("pool %q was written by key layout %s; this router reads layout %s: run `kvrouter pool migrate %s --store URL` "+
		"(keeps the index where a conversion exists) or `kvrouter pool recreate %s --store URL` (drops the pool's state; workers "+
		"re-register and events refill the index), or run a router of layout %s", e.Pool, e.Found, e.Want, e.Pool, e.Pool, e.Found)
}

func (e *LayoutMismatchError) Unwrap() []error { return []error{ErrLayoutMismatch, ErrConflict} }
