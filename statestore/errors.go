package statestore

import (
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

// Filter reasons, in the order they are checked.
const (
	ReasonNotLive     = "not_live"
	ReasonNotAllowed  = "not_allowed"
	ReasonNotPinned   = "not_pinned"
	ReasonBusyPrefill = "busy_prefill"
	ReasonBusyDecode  = "busy_decode"
	// ReasonExcluded: the caller excluded the worker for this request (a gateway retry after a failed
	// forward).
	ReasonExcluded = "excluded"
	// ReasonUnhealthy: forwards to the worker failed unhealthy_after times in a row; it is skipped until
	// its back-off ends, then one request probes it (SPEC §7.2).
	ReasonUnhealthy = "unhealthy"
)

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
	case errors.Is(err, ErrConflict):
		return "conflict"
	case errors.Is(err, ErrNoEligibleWorker):
		return "no_eligible_worker"
	case errors.Is(err, ErrUnavailable):
		return "store_unavailable"
	}
	return "internal"
}
