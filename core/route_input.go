package core

import (
	"encoding/json"
	"fmt"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// DefaultPool is the pool used when a request names none.
const DefaultPool = "default"

// RouteInput is the body of POST /v1/route and /v1/route/explain (SPEC §7).
type RouteInput struct {
	Pool      string `json:"pool,omitempty"`
	RequestID string `json:"request_id,omitempty"`
	// TokenIDs is the prompt; or LocalHashes, when the caller hashed it already.
	TokenIDs    []uint32 `json:"token_ids,omitempty"`
	LocalHashes []Hash   `json:"local_hashes,omitempty"`
	// MMItems are the prompt's multimodal items (images): each one's identity hash and the span of its
	// placeholder tokens in TokenIDs. Blocks overlapping an item fold its hash (SPEC §3); needs TokenIDs.
	MMItems []blockhash.MMItem `json:"mm_items,omitempty"`
	// ISL is the prompt length in tokens; default len(token_ids) or len(local_hashes)·block_size.
	ISL *int64 `json:"isl,omitempty"`
	// BlockSize, when given, must equal the pool's.
	BlockSize      int      `json:"block_size,omitempty"`
	LoRAName       string   `json:"lora_name,omitempty"`
	SessionID      string   `json:"session_id,omitempty"`
	AllowedWorkers []string `json:"allowed_workers,omitempty"`
	// ExcludedWorkers are skipped for this request only (the gateway's retries).
	ExcludedWorkers []string                   `json:"excluded_workers,omitempty"`
	PinnedWorker    string                     `json:"pinned_worker,omitempty"`
	Priority        int                        `json:"priority,omitempty"`
	Config          map[string]json.RawMessage `json:"config,omitempty"`
	// Prompt is text, tokenized by the server's configured tokenizer (the HTTP layer fills TokenIDs).
	Prompt string `json:"prompt,omitempty"`
	// Random, when set, replaces the router's random number in [0,1) (reproducible decisions).
	Random *float64 `json:"random,omitempty"`
	// RequirePrompt refuses an input with no prompt (no token ids, no hashes) and no explicit isl, after
	// every other check (ErrInvalid): the HTTP API sets it (a route needs a prompt); the gateway (load-only
	// routing of unknown prompts) and replay files do not.
	RequirePrompt bool `json:"-"`
}

// normalize turns the input into a store request (hashes, isl, overrides) for a pool of blockSize.
func (in *RouteInput) normalize(blockSize int, maxPrompt int64) (statestore.RouteRequest, error) {
	req := statestore.RouteRequest{Pool: in.Pool, RequestID: in.RequestID, SessionID: in.SessionID,
		AllowedWorkers: in.AllowedWorkers, ExcludedWorkers: in.ExcludedWorkers, PinnedWorker: in.PinnedWorker}
	if in.BlockSize != 0 && in.BlockSize != blockSize {
		return req, fmt.Errorf("%w: block_size %d differs from pool %q's block_size %d", statestore.ErrInvalid, in.BlockSize, in.Pool, blockSize)
	}
	if len(in.TokenIDs) > 0 && len(in.LocalHashes) > 0 {
		return req, fmt.Errorf("%w: give token_ids or local_hashes, not both", statestore.ErrInvalid)
	}
	if int64(len(in.TokenIDs)) > maxPrompt || int64(len(in.LocalHashes))*int64(blockSize) > maxPrompt {
		return req, fmt.Errorf("%w: prompt longer than max_prompt_tokens=%d", statestore.ErrInvalid, maxPrompt)
	}
	if err := checkMMItems(in.MMItems, len(in.TokenIDs)); err != nil {
		return req, err
	}
	var local []uint64
	switch {
	case len(in.TokenIDs) > 0:
		local = blockhash.LocalHashesMM(nil, in.TokenIDs, blockSize, blockhash.LoRASeed(in.LoRAName), in.MMItems)
		req.ISL = int64(len(in.TokenIDs))
	case len(in.LocalHashes) > 0:
		local = make([]uint64, len(in.LocalHashes))
		for i, h := range in.LocalHashes {
			local[i] = uint64(h)
		}
		req.ISL = int64(len(local)) * int64(blockSize)
	}
	if in.ISL != nil {
		if *in.ISL < 0 {
			return req, fmt.Errorf("%w: isl must be >= 0, got %d", statestore.ErrInvalid, *in.ISL)
		}
		if *in.ISL < req.ISL {
			return req, fmt.Errorf("%w: isl %d is shorter than the %d tokens given", statestore.ErrInvalid, *in.ISL, req.ISL)
		}
		req.ISL = *in.ISL
	}
	req.SeqHashes = blockhash.Sequence(nil, local)
	ov, err := ParseOverrides(in.Config)
	if err != nil {
		return req, err
	}
	req.Overrides = ov
	if in.RequirePrompt && len(in.TokenIDs) == 0 && len(in.LocalHashes) == 0 && in.ISL == nil {
		return req, fmt.Errorf("%w: a route needs a prompt: token_ids, local_hashes, prompt (text), or an explicit isl", statestore.ErrInvalid)
	}
	return req, nil
}

// checkMMItems validates multimodal items against a prompt of n tokens: each span must lie inside it.
func checkMMItems(items []blockhash.MMItem, n int) error {
	if len(items) > 0 && n == 0 {
		return fmt.Errorf("%w: mm_items need token_ids", statestore.ErrInvalid)
	}
	for i, it := range items {
		if it.Length < 1 || it.Offset < 0 || it.Offset > n-it.Length {
			return fmt.Errorf("%w: mm_items[%d]: span [%d, %d) is not inside the %d-token prompt", statestore.ErrInvalid, i, it.Offset, it.Offset+it.Length, n)
		}
	}
	return nil
}
