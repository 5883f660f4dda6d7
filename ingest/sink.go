package ingest

import (
	"context"

	"github.com/kvrouter/kvrouter/statestore"
)

// Sink receives normalised event batches; statestore.Store satisfies it. ApplyEvents must be
// idempotent per event id (the store's fencing): a call that failed is retried with the same batch.
type Sink interface {
	ApplyEvents(ctx context.Context, batch statestore.EventBatch) (statestore.ApplyResult, error)
}
