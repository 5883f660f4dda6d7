package core

import (
	"github.com/kvrouter/kvrouter/statestore"
)

// WorkerInput is the body of PUT /v1/workers/{id} (SPEC §7), also a replay "worker" line.
type WorkerInput struct {
	Pool                string     `json:"pool,omitempty"`
	WorkerID            FlexString `json:"worker_id,omitempty"`
	URL                 string     `json:"url"`
	DPSize              int        `json:"dp_size,omitempty"`
	BlockSize           int        `json:"block_size,omitempty"`
	TotalKVBlocks       int64      `json:"total_kv_blocks,omitempty"`
	MaxNumBatchedTokens int64      `json:"max_num_batched_tokens,omitempty"`
	KVEvents            *bool      `json:"kv_events,omitempty"`
}

// Spec returns the store's worker registration.
func (w *WorkerInput) Spec() statestore.WorkerSpec {
	return statestore.WorkerSpec{WorkerID: string(w.WorkerID), URL: w.URL, DPSize: w.DPSize,
		TotalKVBlocks: w.TotalKVBlocks, MaxNumBatchedTokens: w.MaxNumBatchedTokens, KVEvents: w.KVEvents}
}
