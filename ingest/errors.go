package ingest

import "errors"

// Sentinel errors: expected outcomes of Manager and Subscriber calls.
var (
	ErrInvalidConfig  = errors.New("ingest: invalid config")
	ErrDuplicate      = errors.New("ingest: subscriber already exists")
	ErrNotFound       = errors.New("ingest: no such subscriber")
	ErrAlreadyRunning = errors.New("ingest: already running")
)
