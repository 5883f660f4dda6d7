// Package statestore holds kvrouter's shared routing state behind one interface, Store, with two
// implementations: Memory (embedded, in-process) and Redis (shared by any number of stateless routers,
// every decision one atomic Lua script call). Both make identical decisions for identical inputs; a
// differential test replays the same streams through both.
//
// The unit of state is a pool (one model deployment with one KV block size). Inside a pool, a worker is
// a registered engine replica; each of its data-parallel ranks (worker, dp_rank) is a routing candidate
// with its own slice of the prefix index and its own load counters.
//
// Time is always an argument (milliseconds, nowMs), never read from a clock inside a store, so replays
// in virtual time are exact and both stores agree to the millisecond.
package statestore

import "fmt"

// Tier is where a worker holds a cached block. A block counts once, at the best tier held.
type Tier uint8

const (
	TierDevice Tier = 0 // GPU memory (G1)
	TierHost   Tier = 1 // CPU / pinned host memory (G2)
	TierDisk   Tier = 2 // local disk / NVMe (G3)
)

// String returns Dynamo's storage-tier name.
func (t Tier) String() string {
	switch t {
	case TierDevice:
		return "device"
	case TierHost:
		return "host_pinned"
	case TierDisk:
		return "disk"
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// EventKind is the type of a KV cache event.
type EventKind uint8

const (
	EventStored  EventKind = 1
	EventRemoved EventKind = 2
	EventCleared EventKind = 3
)

// StoredBlock is one block of a Stored event. EngineHash is the engine's opaque id of the block on that
// worker (used only to link children and to address removals); LocalHash is kvrouter's own local hash of
// the block's tokens (blockhash.Local), computed by the caller from token ids whenever it has them.
type StoredBlock struct {
	EngineHash uint64
	LocalHash  uint64
}

// Event is one KV event of one (worker, dp_rank), already normalised (engine hashes as u64, tokens hashed).
type Event struct {
	DPRank int
	// EventID orders events per (worker, dp_rank). HasEventID false means "unordered": always applied.
	EventID    uint64
	HasEventID bool
	// Epoch names the engine process (its start id). A change of a non-empty epoch means a restart:
	// the rank's index is cleared before the event is applied. Empty means unknown.
	Epoch string
	Kind  EventKind
	Tier  Tier
	// BlockSize, when > 0, must equal the pool's block size or the event is dropped (block_size_mismatch).
	BlockSize int

	// Stored: Parent is the engine hash of the block this chain continues (HasParent false: the root).
	Parent    uint64
	HasParent bool
	Blocks    []StoredBlock
	// Removed: engine hashes of the evicted blocks.
	Removed []uint64
}

// EventBatch is a run of events of one worker, applied in order in one atomic store call.
type EventBatch struct {
	Pool     string
	WorkerID string
	Events   []Event
	NowMs    int64
}

// ApplyResult counts what happened to each event of a batch.
type ApplyResult struct {
	Applied           int `json:"applied"`                // events applied (including gap and restart ones)
	Stale             int `json:"stale"`                  // event id at or below the last applied one: ignored
	ParentNotFound    int `json:"parent_block_not_found"` // Stored whose parent is unknown: dropped
	BlockNotFound     int `json:"block_not_found"`        // Removed hashes that were unknown (blocks, skipped)
	Gaps              int `json:"gap"`                    // events applied after a missing event id
	Restarts          int `json:"restart"`                // epoch changes that cleared a rank first
	BlockSizeMismatch int `json:"block_size_mismatch"`    // events dropped for a foreign block size
	UnknownWorker     int `json:"unknown_worker"`         // events of an unregistered worker: dropped
	StoredBlocks      int `json:"stored_blocks"`          // blocks newly stored (or given a new tier)
	RemovedBlocks     int `json:"removed_blocks"`         // blocks removed (per tier)
}

// Add accumulates o into r.
func (r *ApplyResult) Add(o ApplyResult) {
	r.Applied += o.Applied
	r.Stale += o.Stale
	r.ParentNotFound += o.ParentNotFound
	r.BlockNotFound += o.BlockNotFound
	r.Gaps += o.Gaps
	r.Restarts += o.Restarts
	r.BlockSizeMismatch += o.BlockSizeMismatch
	r.UnknownWorker += o.UnknownWorker
	r.StoredBlocks += o.StoredBlocks
	r.RemovedBlocks += o.RemovedBlocks
}

// WorkerSpec registers (or re-registers, which also counts as a heartbeat) a worker in a pool.
type WorkerSpec struct {
	WorkerID string `json:"worker_id"`
	URL      string `json:"url"`
	// DPSize is the number of data-parallel ranks (candidates 0..DPSize-1). Default 1.
	DPSize int `json:"dp_size"`
	// TotalKVBlocks is the engine's KV block capacity; 0 = unknown (busy_decode_fraction not applied).
	TotalKVBlocks int64 `json:"total_kv_blocks"`
	// MaxNumBatchedTokens is the engine's per-step token budget; 0 = unknown (busy_prefill_fraction not applied).
	MaxNumBatchedTokens int64 `json:"max_num_batched_tokens"`
	// KVEvents false puts the worker in approximate mode (no events; routed prefixes are indexed with a TTL).
	// Nil means the pool's kv_events setting.
	KVEvents *bool `json:"kv_events,omitempty"`
}

// RankInfo is the state of one (worker, dp_rank).
type RankInfo struct {
	DPRank              int    `json:"dp_rank"`
	ActivePrefillTokens int64  `json:"active_prefill_tokens"`
	ActiveDecodeBlocks  int64  `json:"active_decode_blocks"`
	ActiveRequests      int64  `json:"active_requests"`
	CachedBlocks        int64  `json:"cached_blocks"` // (block, tier-independent) entries held from events
	LastEventID         uint64 `json:"last_event_id"`
	Epoch               string `json:"epoch,omitempty"`
	// Degraded is set when events were lost (a gap) and cleared by a restart or Cleared event.
	Degraded bool `json:"degraded"`
	// TTFT is the rank's own calibration (cost_model ttft, SPEC §6.6) once it has taken a sample; absent,
	// the rank predicts with the pool's fit.
	TTFT *TTFTState `json:"ttft,omitempty"`
}

// ttftShown is a rank's calibration as listed: nil until it has taken a sample.
func ttftShown(s TTFTState) *TTFTState {
	if s.Samples <= 0 {
		return nil
	}
	return &s
}

// Pages of GET /v1/workers (Store.ListWorkers): DefaultWorkersPage workers unless a limit is given, at
// most MaxWorkersPage, and at most MaxWorkersPageRanks dp ranks: a page lists whole workers and stops
// before the worker whose ranks would take it past MaxWorkersPageRanks, unless that worker is the page's
// first (a page is never empty while workers follow; Next says where to go on). So one listing call's
// work is bounded by ranks, whatever the pool's size or the workers' dp sizes (issue 15, SPEC §8: in Redis
// one workers.lua call of O(ranks listed), the largest page under 1 ms of Redis time at 4,096 workers of
// up to 8 ranks: docs/PERFORMANCE.md "Per-call bounds at 4,096 workers (branch wlist)"). A limit above
// the rank bound is not an error: the page is shorter and Next is set. Why 64: a listed rank costs ~2 µs
// of Redis time (its field reads, least-preempted on the loaded 2-core box) and a listed worker about as
// much again; 64 single-rank workers with their fences took 0.38–0.44 ms median there, 128 took 0.65–0.82
// ms and went over 1 ms at the 90th percentile. DefaultWorkersPage workers fit when they have at most 2
// ranks each. A single worker of more than MaxWorkersPageRanks ranks (up to MaxDPSize) is a longer page.
const (
	DefaultWorkersPage  = 32
	MaxWorkersPage      = 1000
	MaxWorkersPageRanks = 64
)

// WorkersQuery selects one page of a pool's workers in id order (byte order of the id).
type WorkersQuery struct {
	// After lists the workers whose id sorts after this one ("" = from the first): the previous page's Next.
	After string
	// Limit is the most workers in the page: 0 (or less) = DefaultWorkersPage; above MaxWorkersPage it is
	// clamped to MaxWorkersPage. The page also stops at MaxWorkersPageRanks ranks (see there).
	Limit int
}

// limit returns the page size the stores use for q.
func (q WorkersQuery) limit() int {
	switch {
	case q.Limit <= 0:
		return DefaultWorkersPage
	case q.Limit > MaxWorkersPage:
		return MaxWorkersPage
	}
	return q.Limit
}

// WorkerPage is one page of a pool's workers. Next is the cursor of the next page (the last worker id of
// this one) when more workers follow, "" when this page is the last.
type WorkerPage struct {
	Workers []WorkerInfo
	Next    string
	// ReclaimPending is the pool's index incarnations (dp ranks' slots) whose entries are still being
	// deleted: a removed worker's ranks, an engine restart's or Cleared event's old index, a dp shrink's
	// ranks. Routing ignores them at once; their entries are reclaimed a bounded amount per later call
	// (Redis: RECLAIM_CALLS Redis calls per route or ingest call), so a backlog that keeps growing means
	// churn faster than the calls reclaim. The same on every page (the pool's count, not the page's).
	ReclaimPending int
}

// WorkerInfo is what GET /v1/workers reports.
type WorkerInfo struct {
	WorkerSpec
	KVEventsEffective bool       `json:"kv_events_effective"`
	Live              bool       `json:"live"`
	LastSeenMs        int64      `json:"last_seen_ms"`
	Ranks             []RankInfo `json:"ranks"`
	// Health is the worker's shared forwarding health (SPEC §7.2).
	Health WorkerHealth `json:"health"`
}

// WorkerHealth is a worker's forwarding health as all routers see it (SPEC §7.2 "Retries and health"),
// kept per worker (all its dp ranks together) in the pool's shared state.
type WorkerHealth struct {
	// ConsecutiveFailures counts forwards that failed in a row (5xx, timeouts, connect failures); a
	// successful forward resets it to 0.
	ConsecutiveFailures int64 `json:"consecutive_failures"`
	// UnhealthyUntilMs is the end of the current back-off window, ms (0 = not marked). While now < this,
	// routing skips the worker (filter reason "unhealthy"); after it, the worker is half-open.
	UnhealthyUntilMs int64 `json:"unhealthy_until_ms,omitempty"`
	// ProbeUntilMs: a decision picked the half-open worker at ProbeUntilMs − BackoffMs (the probe); until
	// this instant every other decision skips it ("unhealthy"), so a probe whose report never comes only
	// blocks the worker for one back-off.
	ProbeUntilMs int64 `json:"probe_until_ms,omitempty"`
	// BackoffMs is the worker's current back-off, ms: unhealthy_backoff_ms when marked, doubled by each
	// failed probe up to MaxBackoffFactor × unhealthy_backoff_ms (0 = not marked).
	BackoffMs int64 `json:"backoff_ms,omitempty"`
	// State is HealthHealthy, HealthUnhealthy, HealthHalfOpen or HealthProbing (see the constants).
	State string `json:"state"`
}

// Health states (WorkerHealth.State).
const (
	// HealthHealthy: routed normally (also every worker while the pool's unhealthy_after is 0).
	HealthHealthy = "healthy"
	// HealthUnhealthy: inside its back-off window; skipped.
	HealthUnhealthy = "unhealthy"
	// HealthHalfOpen: back-off over; the next decision that picks it takes the probe.
	HealthHalfOpen = "half_open"
	// HealthProbing: one decision is probing it; skipped by the others until a report arrives or the
	// probe times out (ProbeUntilMs).
	HealthProbing = "probing"
)

// Overrides are per-request replacements of a pool's scoring knobs; nil fields keep the pool's value.
type Overrides struct {
	OverlapScoreCredit        *float64 `json:"overlap_score_credit,omitempty"`
	HostCacheHitWeight        *float64 `json:"host_cache_hit_weight,omitempty"`
	DiskCacheHitWeight        *float64 `json:"disk_cache_hit_weight,omitempty"`
	PrefillLoadScale          *float64 `json:"prefill_load_scale,omitempty"`
	OverlapScoreCreditDecay   *float64 `json:"overlap_score_credit_decay,omitempty"`
	DecodeActiveRequestWeight *float64 `json:"decode_active_request_weight,omitempty"`
	Temperature               *float64 `json:"temperature,omitempty"`
	BusyPrefillFraction       *float64 `json:"busy_prefill_fraction,omitempty"`
	BusyDecodeFraction        *float64 `json:"busy_decode_fraction,omitempty"`
}

// RouteRequest is one routing decision's input, after hashing: the store never sees tokens.
type RouteRequest struct {
	Pool      string
	RequestID string
	// SeqHashes are the sequence hashes of the prompt's full blocks (blockhash.Sequence), depth D.
	SeqHashes []uint64
	// ISL is the prompt length in tokens (>= 0); required_blocks = ceil(ISL / block_size).
	ISL            int64
	SessionID      string
	AllowedWorkers []string // empty = all
	// ExcludedWorkers are skipped for this request only (filter reason "excluded"): the gateway's
	// retry after a connect failure or a 429/503 from a worker.
	ExcludedWorkers []string
	PinnedWorker    string // empty = none
	Overrides       Overrides
	// Random is the caller's uniform random number in [0,1): tie-break and softmax sampling.
	Random float64
	NowMs  int64
	// Releases are request ids of this pool's leases to end in this call, exactly as Done at NowMs would
	// (after the expired leases are released, before the lease-conflict check and the decision): a router
	// carries the `done`s of requests that finished since its last route on the same pool instead of one
	// call each (core's release coalescing, Options.ReleaseDelay). They are applied whenever the request
	// passes validation, whatever the decision (noelig and conflict too), and never when it does not; an
	// id with no lease is skipped. Done is idempotent, so a caller that cannot tell (any error) sends
	// them again with Done. At most MaxRouteReleases; the one-call explain and Overlap ignore them.
	Releases []string
}

// MaxRouteReleases bounds RouteRequest.Releases: each costs a route call ~5 Redis commands, so the call
// stays bounded (SPEC §8) whatever a router has queued.
const MaxRouteReleases = 64

// Decision is the outcome of Route.
type Decision struct {
	RequestID      string  `json:"request_id"`
	WorkerID       string  `json:"worker_id"`
	DPRank         int     `json:"dp_rank"`
	URL            string  `json:"url,omitempty"`
	OverlapBlocks  int     `json:"overlap_blocks"`
	RequiredBlocks int64   `json:"required_blocks"`
	Cost           float64 `json:"cost"`
	// SessionHit is true when a live session binding chose the worker.
	SessionHit bool `json:"session_hit,omitempty"`
}

// Candidate is one (worker, dp_rank) in an explanation.
type Candidate struct {
	WorkerID            string  `json:"worker_id"`
	DPRank              int     `json:"dp_rank"`
	DeviceBlocks        int     `json:"device_blocks"`
	HostBlocks          int     `json:"host_blocks"`
	DiskBlocks          int     `json:"disk_blocks"`
	EventBlocks         int     `json:"event_blocks"`     // overlap from engine events (all tiers)
	PredictedBlocks     int     `json:"predicted_blocks"` // overlap from approximate/predicted entries
	OverlapBlocks       int     `json:"overlap_blocks"`   // max of the two
	Credit              float64 `json:"credit"`
	ActivePrefillTokens int64   `json:"active_prefill_tokens"`
	ActiveDecodeBlocks  int64   `json:"active_decode_blocks"`
	ActiveRequests      int64   `json:"active_requests"`
	Cost                float64 `json:"cost"`
	// Filtered names why the candidate was not eligible (FilterReason values); empty = eligible.
	Filtered string `json:"filtered,omitempty"`
	// Terms are what Cost is made of (ExplainCosts; cost_model dynamo).
	Terms *CostTerms `json:"terms,omitempty"`
	// TTFTCoeffs (cost_model ttft) are the coefficients the candidate was costed with: its own
	// calibration, or the pool's fit while it has no sample. TTFTTerms are its cost's terms (ExplainCosts).
	TTFTCoeffs *TTFTCoeffs `json:"ttft_coeffs,omitempty"`
	TTFTTerms  *TTFTTerms  `json:"ttft_terms,omitempty"`
}

// Explanation is the outcome of Explain: every candidate, and the decision Route would have made.
type Explanation struct {
	RequestID      string      `json:"request_id"`
	RequiredBlocks int64       `json:"required_blocks"`
	Candidates     []Candidate `json:"candidates"`
	Decision       *Decision   `json:"decision,omitempty"`
	// TieBreak says how the decision was picked among the eligible candidates (ExplainCosts); nil when
	// nothing was eligible.
	TieBreak *TieBreak  `json:"tie_break,omitempty"`
	Error    *ErrorBody `json:"error,omitempty"`
	// Pages is the number of candidate pages when there were more than one (the Redis store on a pool of
	// over ExplainPageCandidates ranks: one call each, after the call that decided); then Snapshot is
	// false: the calls are separate and routes booked between them show in the later pages' loads. Both
	// absent: one atomic snapshot.
	Pages    int   `json:"pages,omitempty"`
	Snapshot *bool `json:"snapshot,omitempty"`
}

// ErrorBody is the JSON shape of an error: {"code": "...", "message": "..."}.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Score is one entry of an overlap query.
type Score struct {
	WorkerID string `json:"worker_id"`
	DPRank   int    `json:"dp_rank"`
	Blocks   int    `json:"blocks"`
}

// PoolInfo is what GET /v1/pools reports.
type PoolInfo struct {
	Name    string     `json:"pool"`
	Config  PoolConfig `json:"config"`
	Workers int        `json:"workers"`
	// Rescoring: a PutPool changing a knob the load order is scored by is still being applied (Redis
	// store: its rescoring in steps, docs/REDIS.md "Rescoring in steps"); Config is the config in effect
	// until it ends.
	Rescoring bool `json:"rescoring,omitempty"`
}
