package statestore

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// PoolConfig holds a pool's knobs (SPEC §6.4). JSON names are the API's. Zero values of the optional
// features mean "off"; DefaultPoolConfig gives the documented defaults. Every knob field (all but the
// gateway settings) has its row in knobTable (knobs.go): default, bounds, Redis field, overridability;
// TestKnobTableCoversConfig fails on a field without one.
type PoolConfig struct {
	// BlockSize is the engines' KV block size in tokens. Required (> 0); immutable while workers exist.
	BlockSize int `json:"block_size"`
	// OverlapScoreCredit multiplies device-tier overlap blocks in the cost (default 1.0; 0 = pure load balancing).
	OverlapScoreCredit float64 `json:"overlap_score_credit"`
	// HostCacheHitWeight is the credit per host-tier block (default 0.75).
	HostCacheHitWeight float64 `json:"host_cache_hit_weight"`
	// DiskCacheHitWeight is the credit per disk-tier block (default 0.25).
	DiskCacheHitWeight float64 `json:"disk_cache_hit_weight"`
	// PrefillLoadScale multiplies the prefill term (default 1.0).
	PrefillLoadScale float64 `json:"prefill_load_scale"`
	// OverlapScoreCreditDecay (d) shrinks device credit on workers with more queued prefill than the
	// least-loaded eligible one (default 0 = no decay).
	OverlapScoreCreditDecay float64 `json:"overlap_score_credit_decay"`
	// DecodeActiveRequestWeight is the cost per active request (default 0).
	DecodeActiveRequestWeight float64 `json:"decode_active_request_weight"`
	// Temperature > 0 samples by softmax over normalised costs; 0 takes the minimum (default 0).
	Temperature float64 `json:"temperature"`
	// BusyPrefillFraction: a rank is busy when active_prefill_tokens > f · max_num_batched_tokens
	// (default 0 = no filter).
	BusyPrefillFraction float64 `json:"busy_prefill_fraction"`
	// BusyDecodeFraction: a rank is busy when active_decode_blocks > f · total_kv_blocks (default 0 = no filter).
	BusyDecodeFraction float64 `json:"busy_decode_fraction"`
	// KVEvents is the pool default for workers that do not say (default true). False = approximate mode.
	KVEvents bool `json:"kv_events"`
	// ApproxTTLMs is the sliding TTL of approximate entries, milliseconds (default 120000).
	ApproxTTLMs int64 `json:"approx_ttl_ms"`
	// PredictedTTLMs is the TTL of predict-on-route entries for event-emitting workers, ms (default 0 = off).
	PredictedTTLMs int64 `json:"predicted_ttl_ms"`
	// SessionAffinityTTLMs is the idle TTL of session bindings, ms (default 0 = session affinity off).
	SessionAffinityTTLMs int64 `json:"session_affinity_ttl_ms"`
	// LeaseTTLMs is how long a booked request counts before it is released automatically, ms (default 300000).
	LeaseTTLMs int64 `json:"lease_ttl_ms"`
	// WorkerTTLMs: when > 0 a worker is live only while it re-registers or emits events within this window, ms
	// (default 0 = live until removed).
	WorkerTTLMs int64 `json:"worker_ttl_ms"`
	// MaxPromptTokens bounds a request's prompt, tokens (default 1048576).
	MaxPromptTokens int64 `json:"max_prompt_tokens"`
	// UnhealthyAfter is the number of failed forwards in a row (Store.ReportForward) that marks a worker
	// unhealthy for every router (SPEC §7.2; default 3; 0 = health tracking off: failures are counted and
	// shown, never acted on).
	UnhealthyAfter int64 `json:"unhealthy_after"`
	// UnhealthyBackoffMs is how long a worker marked unhealthy is skipped before one request may probe it,
	// ms (default 10000; must be > 0 while UnhealthyAfter > 0). Each failed probe doubles the worker's
	// back-off, up to MaxBackoffFactor times this value.
	UnhealthyBackoffMs int64 `json:"unhealthy_backoff_ms"`
	// CostModel is how candidates are costed (SPEC §6.6): CostModelDynamo (default; "" reads as it) or
	// CostModelTTFT. Not overridable per request.
	CostModel string `json:"cost_model"`
	// TTFTPrefillRate is cost_model ttft's pool default prefill rate, tokens/s (0 = DefaultTTFTPrefillRate):
	// where every rank's calibration starts, and the scale of its bounds.
	TTFTPrefillRate float64 `json:"ttft_prefill_rate"`
	// TTFTDecodeCoeff is cost_model ttft's pool default decode interference, s per active decode block
	// (0 = DefaultTTFTDecodeCoeff).
	TTFTDecodeCoeff float64 `json:"ttft_decode_coeff"`

	// Gateway settings (SPEC §7.2). They do not enter decisions; they tell the OpenAI-compatible gateway
	// which requests belong to the pool and how to turn them into the engine's token ids.

	// Models are the model names the pool serves: a gateway request's "model" picks the pool whose list
	// holds it (default none: the pool is reachable only through the decision API).
	Models []string `json:"models,omitempty"`
	// Tokenizer is the path of the engines' Hugging Face tokenizer.json on the router's filesystem
	// (default "": no local tokenizer).
	Tokenizer string `json:"tokenizer,omitempty"`
	// ChatTemplate is the path of a tokenizer_config.json (its "chat_template") or of a bare Jinja
	// template file (default "": tokenizer_config.json beside Tokenizer, when present).
	ChatTemplate string `json:"chat_template,omitempty"`
	// Tokenize says how the gateway obtains token ids: "local" (the Tokenizer file; the default when one
	// is set), "engine" (a worker's POST /tokenize, cached by prompt digest) or "none" (load-only routing,
	// marked x-kvrouter-overlap: unknown). Default "": local when Tokenizer is set, else none.
	Tokenize string `json:"tokenize,omitempty"`
	// ImageTokenID is the token id an image's placeholder expands to in the engine's prompt (the model's
	// image_token_id, e.g. 151655 for Qwen2-VL's <|image_pad|>; `kvrouter mock --multimodal` uses
	// 99). With tokenize "engine", the gateway finds each image's span as a run of this id in the
	// engine's /tokenize answer and folds the image's identity into the blocks it covers (SPEC §3).
	// Default 0: none — chat requests with images route by load only.
	ImageTokenID int64 `json:"image_token_id,omitempty"`
}

// Tokenize modes (PoolConfig.Tokenize).
const (
	TokenizeLocal  = "local"
	TokenizeEngine = "engine"
	TokenizeNone   = "none"
)

// Gateway limits on pool settings.
const (
	MaxModelsPerPool = 64
	MaxPathLength    = 4096
)

// TokenizeMode resolves the effective tokenize mode ("" → local with a tokenizer, else none).
func (c PoolConfig) TokenizeMode() string {
	if c.Tokenize != "" {
		return c.Tokenize
	}
	if c.Tokenizer != "" {
		return TokenizeLocal
	}
	return TokenizeNone
}

// ServesModel reports whether the pool lists the model name.
func (c PoolConfig) ServesModel(model string) bool {
	for _, m := range c.Models {
		if m == model {
			return true
		}
	}
	return false
}

func (c PoolConfig) validateGateway() error {
	if len(c.Models) > MaxModelsPerPool {
		return fmt.Errorf("%w: models lists %d names (at most %d)", ErrInvalid, len(c.Models), MaxModelsPerPool)
	}
	seen := map[string]bool{}
	for i, m := range c.Models {
		if m == "" || len(m) > MaxIDLength {
			return fmt.Errorf("%w: models[%d] must be 1..%d bytes", ErrInvalid, i, MaxIDLength)
		}
		if seen[m] {
			return fmt.Errorf("%w: models lists %q twice", ErrInvalid, m)
		}
		seen[m] = true
	}
	if len(c.Tokenizer) > MaxPathLength || len(c.ChatTemplate) > MaxPathLength {
		return fmt.Errorf("%w: tokenizer and chat_template paths must be at most %d bytes", ErrInvalid, MaxPathLength)
	}
	if c.ImageTokenID < 0 || c.ImageTokenID > math.MaxUint32 {
		return fmt.Errorf("%w: image_token_id must be a token id in [0, %d], got %d", ErrInvalid, uint32(math.MaxUint32), c.ImageTokenID)
	}
	switch c.Tokenize {
	case "", TokenizeNone, TokenizeEngine:
	case TokenizeLocal:
		if c.Tokenizer == "" {
			return fmt.Errorf("%w: tokenize \"local\" needs a tokenizer path", ErrInvalid)
		}
	default:
		return fmt.Errorf("%w: tokenize must be \"local\", \"engine\" or \"none\", got %q", ErrInvalid, c.Tokenize)
	}
	return nil
}

// Limits bound what callers may create in a store (SPEC §7.3). Zero fields take the defaults.
type Limits struct {
	// MaxPools is the most pools one store holds; creating another is ErrConflict (409). Default
	// DefaultMaxPools (1024). With Redis the count is checked before the pool's own atomic script, so
	// routers creating pools at the same instant may overshoot by a few.
	MaxPools int
	// MaxWorkers is the most workers one pool holds; registering another is ErrConflict (409), checked
	// atomically. Default and upper bound MaxWorkersPerPool (4096).
	MaxWorkers int
	// MaxEventIDJump: an event id more than this beyond its rank's last applied one is treated as an
	// engine restart (the rank is cleared, counted in restarts), not as a gap — one absurd id must not
	// make every later event stale. Default DefaultMaxEventIDJump (2^32); identical in both stores.
	MaxEventIDJump uint64
}

// MaxSessionsPerPool bounds the session bindings one pool holds (live ones, plus expired ones not yet
// reclaimed: each route call reclaims up to 32). A route with a new session id beyond it binds nothing
// and routes normally (counted: memory sessOver, Redis sc "sover"). 2^18 bindings are ~30 MB of Redis.
// Both stores count stored bindings, and they reclaim on their own schedules, so right at the cap they
// may differ in which new session gets a binding; far below it (every replay and differential suite)
// their decisions are identical.
const MaxSessionsPerPool = 1 << 18

// DefaultMaxEventIDJump is Limits.MaxEventIDJump's default.
const DefaultMaxEventIDJump = 1 << 32

func (l Limits) maxEventIDJump() uint64 {
	if l.MaxEventIDJump == 0 {
		return DefaultMaxEventIDJump
	}
	return l.MaxEventIDJump
}

// DefaultMaxPools is Limits.MaxPools' default.
const DefaultMaxPools = 1024

// Validate names a bad limit by its flag.
func (l Limits) Validate() error {
	if l.MaxPools < 0 {
		return fmt.Errorf("%w: max-pools %d must be >= 0 (0 = %d)", ErrInvalid, l.MaxPools, DefaultMaxPools)
	}
	if l.MaxWorkers < 0 || l.MaxWorkers > MaxWorkersPerPool {
		return fmt.Errorf("%w: max-workers %d must be in [0, %d] (0 = %d)", ErrInvalid, l.MaxWorkers, MaxWorkersPerPool, MaxWorkersPerPool)
	}
	return nil
}

func (l Limits) maxPools() int {
	if l.MaxPools <= 0 {
		return DefaultMaxPools
	}
	return l.MaxPools
}

func (l Limits) maxWorkers() int {
	if l.MaxWorkers <= 0 {
		return MaxWorkersPerPool
	}
	return l.MaxWorkers
}

func (l Limits) tooManyPools(pool string) error {
	return fmt.Errorf("%w: cannot create pool %q: the store already holds %d pools (--max-pools)", ErrConflict, pool, l.maxPools())
}

func (l Limits) tooManyWorkers(pool string) error {
	return fmt.Errorf("%w: cannot register another worker: pool %q already has %d workers (--max-workers)", ErrConflict, pool, l.maxWorkers())
}

// Limits that keep every store call bounded (SPEC §8, §10).
const (
	MaxBlockSize       = 1 << 16
	MaxTTLMs           = 30 * 24 * 3600 * 1000 // 30 days
	MaxPromptTokensCap = 1 << 24               // 16 M tokens
	MaxDPSize          = 1024
	MaxWorkersPerPool  = 4096
	MaxKnob            = 1e9 // any float knob above this is absurd
	MaxIDLength        = 256 // worker, pool, request and session ids, bytes
	MaxUnhealthyAfter  = 1 << 20
	// MaxBackoffFactor caps a worker's health back-off at this multiple of unhealthy_backoff_ms: each
	// failed probe doubles it (1×, 2×, 4×, 8×, 8×, …).
	MaxBackoffFactor = 8
)

// DefaultPoolConfig returns the documented defaults (knobTable) for a pool of the given block size.
func DefaultPoolConfig(blockSize int) PoolConfig {
	var c PoolConfig
	for _, k := range knobTable {
		k.Set(&c, k.Default)
	}
	c.BlockSize = blockSize
	return c
}

// Validate reports the first bad knob (knobTable order, then the rules between knobs), naming it.
func (c PoolConfig) Validate() error {
	for _, k := range knobTable {
		if err := k.check(&c); err != nil {
			return err
		}
	}
	if c.UnhealthyAfter > 0 && c.UnhealthyBackoffMs == 0 {
		return fmt.Errorf("%w: unhealthy_backoff_ms must be > 0 while unhealthy_after > 0", ErrInvalid)
	}
	return c.validateGateway()
}

// Apply returns the pool config with the request's overrides applied.
func (o Overrides) Apply(c PoolConfig) PoolConfig {
	if o == (Overrides{}) {
		return c
	}
	for _, k := range overridable {
		if v := *k.override(&o); v != nil {
			k.Set(&c, *v)
		}
	}
	return c
}

// Validate checks every set override like the pool knob it replaces.
func (o Overrides) Validate() error {
	for _, k := range overridable {
		if v := *k.override(&o); v != nil {
			if err := k.checkFloat("config.", *v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate checks a worker registration.
func (w WorkerSpec) Validate() error {
	if err := CheckID("worker_id", w.WorkerID); err != nil {
		return err
	}
	if w.DPSize < 0 || w.DPSize > MaxDPSize {
		return fmt.Errorf("%w: dp_size must be in [1, %d], got %d", ErrInvalid, MaxDPSize, w.DPSize)
	}
	if w.TotalKVBlocks < 0 || w.MaxNumBatchedTokens < 0 {
		return fmt.Errorf("%w: total_kv_blocks and max_num_batched_tokens must be >= 0", ErrInvalid)
	}
	if len(w.URL) > 4096 {
		return fmt.Errorf("%w: url longer than 4096 bytes", ErrInvalid)
	}
	return nil
}

// CheckID validates an identifier (pool, worker, request or session id): 1..MaxIDLength bytes.
func CheckID(what, id string) error {
	if id == "" {
		return fmt.Errorf("%w: %s must not be empty", ErrInvalid, what)
	}
	if len(id) > MaxIDLength {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalid, what, MaxIDLength)
	}
	// Invalid UTF-8 (a percent-decoded path segment) or U+FFFD (what a JSON decoder makes of invalid
	// bytes or lone surrogates) would be stored rewritten or unprintable: refuse, never rewrite.
	if !utf8.ValidString(id) || strings.ContainsRune(id, utf8.RuneError) {
		return fmt.Errorf("%w: %s is not valid UTF-8 (or holds U+FFFD)", ErrInvalid, what)
	}
	return nil
}

// dpSize returns the effective number of ranks (DPSize 0 means 1).
func (w WorkerSpec) dpSize() int {
	if w.DPSize <= 0 {
		return 1
	}
	return w.DPSize
}
