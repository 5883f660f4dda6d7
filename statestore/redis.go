package statestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/luascripts"
)

// Redis is the shared Store: all state in Redis (standalone or cluster), every operation one call of a
// Redis Function on one pool's hash-tagged keys (SPEC §8). It makes the same decisions as Memory for the
// same inputs: route.lua mirrors selection.go operation by operation, and the jump search of
// memory_overlap.go.
//
// The operations are one Functions library per key layout (luascripts.Library, kvrouter_v<layout>),
// loaded on first use and again whenever a node answers "Function not found" (a restarted Redis without
// persistence, a failover to a node that never had it); see redis_functions.go.
type Redis struct {
	c      rueidis.Client
	name   string
	prefix string
	lib    string       // the Functions library source (FUNCTION LOAD REPLACE)
	route  *rueidis.Lua // RedisOptions.RouteScript as an EVALSHA script; nil = the library's route
	limits Limits
	keys   keyCache // the operations' KEYS per pool (exec)
	// fastRoutes counts decisions route.lua made through its sublinear selection (choose_fast), not
	// the full scan: a test hook (TestSelectionExactAgainstFullScan checks the fast path ran).
	fastRoutes atomic.Int64
	// explainPage: candidates per explain call (0 = ExplainPageCandidates); explainBetween, when set, runs
	// before each explain page after the first (its 1-based index). Test knobs (export_test.go).
	explainPage    int
	explainBetween func(page int)
	fastHeads      atomic.Int64 // paged explains whose head decided through choose_fast (a test hook)
}

// RedisOptions configure NewRedis.
type RedisOptions struct {
	// Name identifies the store in errors ("redis://host:port"). Default "redis".
	Name string
	// Prefix is prepended to every key (a namespace; must not contain '{' or '}'). Default "kvr:".
	Prefix string
	// RouteScript replaces the embedded route operation by a plain script (lib included, as
	// luascripts.Source builds it) sent with EVALSHA: `kvrouter bench route --route-script` times
	// variants of it. Default "" = the library's route function.
	RouteScript string
	// Limits on pools and workers (SPEC §7.3). Default: Limits' defaults.
	Limits Limits
}

var _ Store = (*Redis)(nil)

// MaxBlocksPerCall bounds the blocks of one apply_events call, MaxBlocksPerPiece the blocks of one piece
// of an event (ApplyEvents cuts larger events), and applyWorkBudget the Redis commands a call may issue
// before it stops between two pieces (apply_events.lua's work budget; the caller resumes in a new call).
// Why: SPEC §8 wants every call under 1 ms of Redis time. A block costs 1–3 commands (a new block: its
// HSETNX and its engine-map bucket; a block other workers already hold: a read, a write back and its
// bucket), ~4–8 µs each with their Lua work at 1 M entries — so a block count alone bounds a call only
// loosely (docs/PERFORMANCE.md "Ingest calls bounded by work").
//
// Why 90 (it was 140 until the thirteenth session): a call's tail is not its commands alone. The Lua
// collector's steps inside a call grow with what the call allocates, and Redis's forced step (every 50th
// script call, up to ~0.7 M instructions) lands on top, so at 140 — 64 blocks a call for new chains,
// 32 for shared ones — the largest ingest calls at 4,096 workers reached 3.1 M instructions at the p99.9
// and 3.4 M at the max (callgrind): ~1 ms on a quiet box before the forced step, the largest calls of
// the whole system, each one a route decision queued behind it waited for. At 90 a call of new chains
// carries 32 blocks (~66 commands, then the next piece's estimate of ~33 passes 90) and one of chains
// other workers hold 16 (~50, then ~50 more would): p99.9 2.06 M, max 2.2 M instructions at 4,096
// workers. The price is the per-call part (~0.25 M instructions: the FCALL's keys, the worker record,
// fence, counters, reclamation, collector) paid twice as often: +20 % (new chains) to +23–26 % (shared)
// Redis instructions per stored block. 90 sits between the cuts (32/48 blocks of new chains at ~96–102,
// 16/32 of shared ones at ~96–104), so a command more or less per piece does not move them;
// TestApplyWorkBudgetChainSizes pins both.
const (
	MaxBlocksPerCall  = 64
	MaxBlocksPerPiece = 16
)

// applyWorkBudget is apply_events' work budget in Redis commands (a variable so tests can shrink it).
var applyWorkBudget = 90

// fullScanMaxRanks is route.lua's full-scan bound (a route's last argument): a pool of at most this many
// ranks is decided by the full scan (evaluate) even where the load-order walk (choose_fast, issue 15's
// sublinear selection) may decide. Both are exact and decide identically (TestSelectionExactAgainstFullScan,
// TestRedisFullScanBound); the bound only picks the one that costs Redis less CPU. Why 64: the walk's fixed
// work (lz's head, the bound rank, the dead set, their memos) costs more than scanning a small roster's
// loads. Redis CPU per decision (route + done), pinned, alternated, docs/PERFORMANCE.md "Twenty-second
// session": the full scan is 6–20 % cheaper at 16 ranks, about even at 64 (−14 % to +5 % in two runs),
// 7–11 % dearer at 128 and 16–19 % at 256: the crossover is near 64. The memory store has no such cost
// and always takes its chooseFast. Since layout 7 it is also put_worker's argument: a pool keeps its load
// orders (lz, lp: the walk's, moved by every booking and release) only once a registration leaves it with
// more ranks (lib.lua "Load orders only where a route may walk"); so a test that makes small pools take the
// walk (SetFullScanMaxRanks) sets it before their workers register.
var fullScanMaxRanks = 64

// engineMapLoad is the average engine-map entries per bucket (blocks held per bucket of a slot's engine map)
// beyond which apply_events splits one bucket (lib.lua gparams: linear hashing). Why 200: a bucket not yet
// split in the current round holds up to twice the average, and Redis keeps a hash a listpack only up to
// hash-max-listpack-entries (512 by default; past it the bucket becomes a hashtable for good: 2× the
// memory per entry and 2× the Redis CPU per stored block); 2·200 plus the spread of a random bucket stays
// under 512. A 16-worker pool of 1 M entries (62.5 k blocks per rank, ~244 per bucket of 256) grows to ~312
// buckets per rank. A variable so tests can make maps grow with a few blocks (fractions: below one block
// per bucket).
var engineMapLoad = 200.0

// eventIndexLoad is the average event-index entries per bucket beyond which apply_events splits one bucket
// of the pool's event index (the same linear hashing). Why 64: it is the index's density at 1 M entries in
// its 16,384 first buckets (61), where route's HGETs scan ~61-entry listpacks; growing keeps them at
// 64–128 entries (a route's index lookups cost what they cost at 1 M entries) instead of 512 at 8.4 M
// entries and hashtables beyond. A variable so tests can make the index grow with a few blocks.
var eventIndexLoad = 64.0

// NewRedis returns a Redis store over a client the caller created (it never dials by itself).
func NewRedis(c rueidis.Client, opts RedisOptions) (*Redis, error) {
	if opts.Name == "" {
		opts.Name = "redis"
	}
	if opts.Prefix == "" {
		opts.Prefix = "kvr:"
	}
	if !validPrefix(opts.Prefix) {
		return nil, fmt.Errorf("%w: redis key prefix %q must not contain '{' or '}'", ErrInvalid, opts.Prefix)
	}
	if err := opts.Limits.Validate(); err != nil {
		return nil, err
	}
	lib, err := luascripts.Library()
	if err != nil {
		return nil, err
	}
	r := &Redis{c: c, name: opts.Name, prefix: opts.Prefix, lib: lib, limits: opts.Limits}
	if opts.RouteScript != "" {
		r.route = rueidis.NewLuaScript(opts.RouteScript)
	}
	return r, nil
}

// Name implements Store.
func (r *Redis) Name() string { return r.name }

// Close implements Store.
func (r *Redis) Close() error { r.c.Close(); return nil }

// Ping implements Store.
func (r *Redis) Ping(ctx context.Context) error {
	err := r.c.Do(ctx, r.c.B().Ping().Build()).Error()
	if err != nil && isConnError(err) && ctx.Err() == nil { // a connection that broke while Redis was down
		err = r.c.Do(ctx, r.c.B().Ping().Build()).Error()
	}
	if err != nil {
		return r.wrap("ping", err)
	}
	return nil
}

// isConnError reports a transport failure (not a Redis error reply, not a cancelled context).
func isConnError(err error) bool {
	var re *rueidis.RedisError
	return !errors.As(err, &re) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// transientPrefixes are the error replies of a Redis that cannot serve now but will (SPEC §8 "Losing
// Redis"): still loading its dataset, busy in a long script, a replica cut off from its primary or
// written to after a failover demoted it, a cluster resharding or failing over, out of memory.
var transientPrefixes = []string{"LOADING", "BUSY", "MASTERDOWN", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS", "OOM"}

// isTransientReply reports whether a Redis error reply is one of transientPrefixes.
func isTransientReply(re *rueidis.RedisError) bool {
	msg := re.Error()
	for _, p := range transientPrefixes {
		if strings.HasPrefix(msg, p) && (len(msg) == len(p) || msg[len(p)] == ' ') {
			return true
		}
	}
	return false
}

// wrap maps a client error: a transient Redis reply (isTransientReply), a refused or dropped
// connection, a closed client: ErrUnavailable; the caller's deadline: context.DeadlineExceeded (the API's
// "timeout"); other Redis replies (a script error) stay internal errors.
func (r *Redis) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		if isTransientReply(re) {
			return fmt.Errorf("%w: %s: %s: %v", ErrUnavailable, r.name, op, err)
		}
		return fmt.Errorf("statestore: redis %s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("statestore: redis %s %s: %w", r.name, op, err)
	}
	return fmt.Errorf("%w: %s: %s: %v", ErrUnavailable, r.name, op, err)
}

func msgStr(m rueidis.RedisMessage) string { s, _ := m.ToString(); return s }
func msgInt(m rueidis.RedisMessage) int64 {
	if v, err := m.AsInt64(); err == nil {
		return v
	}
	return 0
}
func msgFloat(m rueidis.RedisMessage) float64 {
	s, _ := m.ToString()
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func fstr(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
func istr(v int64) string   { return strconv.FormatInt(v, 10) }

func unknownPool(pool string) error { return fmt.Errorf("%w: %q", ErrUnknownPool, pool) }

// rescoreStepMembers is the lz members one rescore_step call walks (ZSCAN COUNT): ~0.3 ms of Redis time at
// 4,096 ranks (docs/PERFORMANCE.md "Rescoring in steps"). A variable so tests can take tiny steps.
var rescoreStepMembers = 64

// PutPool implements Store. A change of a knob the load order is scored by (prefill_load_scale,
// decode_active_request_weight, block_size) on a pool with workers is applied in bounded steps
// (rescore_step.lua, docs/REDIS.md "Rescoring in steps"): PutPool drives them and returns once the new
// knobs are in effect; until then every operation uses the knobs before the call.
func (r *Redis) PutPool(ctx context.Context, pool string, cfg PoolConfig) error {
	gen, err := r.putPool(ctx, pool, cfg)
	if err != nil || gen == 0 {
		return err
	}
	return r.finishRescoring(ctx, pool, gen)
}

// finishRescoring drives rescore_step calls of generation gen until they report the switch done (or
// that a later PutPool cancelled or superseded gen: that caller drives its own).
func (r *Redis) finishRescoring(ctx context.Context, pool string, gen int64) error {
	for {
		done, err := r.rescoreStep(ctx, pool, gen, rescoreStepMembers)
		if err != nil || done {
			return err
		}
	}
}

// rescoreStep runs one rescore_step call of n members; it reports whether no rescoring of generation gen
// is under way any more.
func (r *Redis) rescoreStep(ctx context.Context, pool string, gen int64, n int) (bool, error) {
	arr, err := r.exec(ctx, luascripts.RescoreStep, pool, []string{istr(gen), strconv.Itoa(n)})
	if err != nil {
		return false, err
	}
	switch msgStr(arr[0]) {
	case "done":
		return true, nil
	case "more":
		return false, nil
	case "unknown_pool":
		return false, unknownPool(pool)
	}
	return false, r.wrap("rescore_step", fmt.Errorf("unexpected reply %q", msgStr(arr[0])))
}

// putPool runs put_pool; it returns the generation of the rescoring the call started or joined (0: the
// knobs are in effect already).
func (r *Redis) putPool(ctx context.Context, pool string, cfg PoolConfig) (int64, error) {
	if err := CheckID("pool", pool); err != nil {
		return 0, err
	}
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	args := make([]string, 0, 2*len(knobTable)+8)
	for _, k := range knobTable { // cfg order, "bs" first (put_pool.lua reads it as ARGV[2])
		args = append(args, k.Short, k.encode(&cfg))
	}
	args = append(args, gatewayFields(cfg)...)
	if err := r.checkPoolLimit(ctx, pool); err != nil {
		return 0, err
	}
	if err := r.legacyMismatch(ctx, pool); err != nil { // never a second pool beside one layouts 1–5 wrote
		return 0, err
	}
	arr, err := r.exec(ctx, luascripts.PutPool, pool, args)
	if err != nil {
		return 0, err
	}
	var gen int64
	switch msgStr(arr[0]) {
	case "conflict":
		return 0, fmt.Errorf("%w: pool %q has workers; block_size %d cannot change to %d", ErrConflict, pool, msgInt(arr[1]), cfg.BlockSize)
	case "rescoring":
		gen = msgInt(arr[1])
	}
	if err := r.c.Do(ctx, r.c.B().Sadd().Key(PoolsKey(r.prefix)).Member(pool).Build()).Error(); err != nil {
		return 0, r.wrap("put_pool", err)
	}
	if err := r.writeTombstone(ctx, pool); err != nil {
		return 0, err
	}
	return gen, nil
}

// checkPoolLimit refuses a new pool once the registry holds Limits.MaxPools (SISMEMBER and SCARD of
// the registry, one round trip; not atomic with put_pool, which runs in the pool's own slot).
func (r *Redis) checkPoolLimit(ctx context.Context, pool string) error {
	key := PoolsKey(r.prefix)
	res := r.c.DoMulti(ctx, r.c.B().Sismember().Key(key).Member(pool).Build(), r.c.B().Scard().Key(key).Build())
	known, err := res[0].AsBool()
	if err != nil {
		return r.wrap("put_pool", err)
	}
	n, err := res[1].AsInt64()
	if err != nil {
		return r.wrap("put_pool", err)
	}
	if !known && n >= int64(r.limits.maxPools()) {
		return r.limits.tooManyPools(pool)
	}
	return nil
}

// GetPool implements Store. A pool written by another key layout is a *LayoutMismatchError.
func (r *Redis) GetPool(ctx context.Context, pool string) (PoolConfig, error) {
	cfg, layout, err := r.readPoolConfig(ctx, pool)
	if err != nil {
		return PoolConfig{}, err
	}
	if layout != strconv.Itoa(luascripts.Layout) {
		return PoolConfig{}, &LayoutMismatchError{Pool: pool, Found: layout, Want: strconv.Itoa(luascripts.Layout)}
	}
	return cfg, nil
}

// readPoolConfig reads a pool's knobs whatever its layout (cfg's string fields have not changed since
// layout 1) and the layout it records ("1" when none).
func (r *Redis) readPoolConfig(ctx context.Context, pool string) (PoolConfig, string, error) {
	cfg, layout, err := r.readPoolConfigAt(ctx, PoolKeys(r.prefix, pool)[0])
	if err == nil && layout == "" {
		if err := r.legacyMismatch(ctx, pool); err != nil {
			return PoolConfig{}, "", err
		}
		return PoolConfig{}, "", unknownPool(pool)
	}
	return cfg, layout, err
}

// readPoolConfigAt reads the pool config in cfg hash key ("" layout: no such key).
func (r *Redis) readPoolConfigAt(ctx context.Context, key string) (PoolConfig, string, error) {
	m, err := r.c.Do(ctx, r.c.B().Hgetall().Key(key).Build()).AsStrMap()
	if err != nil {
		return PoolConfig{}, "", r.wrap("get_pool", err)
	}
	if len(m) == 0 {
		return PoolConfig{}, "", nil
	}
	layout := m["layout"]
	if layout == "" {
		layout = "1"
	}
	cfg := PoolConfig{Models: decodeModels(m["models"]), Tokenizer: m["tok"], ChatTemplate: m["tpl"], Tokenize: m["tokm"]}
	cfg.ImageTokenID, _ = strconv.ParseInt(m["itok"], 10, 64)
	for _, k := range knobTable {
		k.decode(&cfg, m[k.Short])
	}
	return cfg, layout, nil
}

// gatewayFields are the pool hash's string fields for the gateway settings (never read by Lua: they
// are not in the knob table (knobs_gen.lua's CFG_FIELDS), so the packed "bin" config is unaffected).
func gatewayFields(cfg PoolConfig) []string {
	models, _ := json.Marshal(cfg.Models)
	if cfg.Models == nil {
		models = []byte("[]")
	}
	return []string{"models", string(models), "tok", cfg.Tokenizer, "tpl", cfg.ChatTemplate, "tokm", cfg.Tokenize,
		"itok", strconv.FormatInt(cfg.ImageTokenID, 10)}
}

func decodeModels(s string) []string {
	var out []string
	if s != "" {
		_ = json.Unmarshal([]byte(s), &out)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (r *Redis) poolNames(ctx context.Context) ([]string, error) {
	names, err := r.c.Do(ctx, r.c.B().Smembers().Key(PoolsKey(r.prefix)).Build()).AsStrSlice()
	if err != nil {
		return nil, r.wrap("pools", err)
	}
	sort.Strings(names)
	return names, nil
}

// Pools implements Store.
func (r *Redis) Pools(ctx context.Context) ([]PoolInfo, error) {
	names, err := r.poolNames(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]PoolInfo, 0, len(names))
	for _, n := range names {
		cfg, err := r.GetPool(ctx, n)
		if errors.Is(err, ErrUnknownPool) {
			continue
		}
		if err != nil {
			return nil, err
		}
		keys := PoolKeys(r.prefix, n)
		res := r.c.DoMulti(ctx, r.c.B().Hlen().Key(keys[2]).Build(), r.c.B().Hexists().Key(keys[0]).Field("pbin").Build())
		cnt, err := res[0].AsInt64()
		if err != nil {
			return nil, r.wrap("pools", err)
		}
		rescoring, err := res[1].AsBool()
		if err != nil {
			return nil, r.wrap("pools", err)
		}
		out = append(out, PoolInfo{Name: n, Config: cfg, Workers: int(cnt), Rescoring: rescoring})
	}
	return out, nil
}

// PutWorker implements Store.
func (r *Redis) PutWorker(ctx context.Context, pool string, spec WorkerSpec, now int64) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	kve := "-1"
	if spec.KVEvents != nil {
		kve = "0"
		if *spec.KVEvents {
			kve = "1"
		}
	}
	arr, err := r.exec(ctx, luascripts.PutWorker, pool, []string{istr(now), spec.WorkerID, spec.URL, strconv.Itoa(spec.dpSize()),
		istr(spec.TotalKVBlocks), istr(spec.MaxNumBatchedTokens), kve, strconv.Itoa(r.limits.maxWorkers()),
		istr(int64(fullScanMaxRanks))})
	if err != nil {
		return err
	}
	switch msgStr(arr[0]) {
	case "unknown_pool":
		return unknownPool(pool)
	case "too_many":
		return r.limits.tooManyWorkers(pool)
	}
	return nil
}

// RemoveWorker implements Store.
func (r *Redis) RemoveWorker(ctx context.Context, pool, workerID string, now int64) error {
	arr, err := r.exec(ctx, luascripts.RemoveWorker, pool, []string{istr(now), workerID})
	if err != nil {
		return err
	}
	switch msgStr(arr[0]) {
	case "unknown_pool":
		return unknownPool(pool)
	case "unknown_worker":
		return fmt.Errorf("%w: %q in pool %q", ErrUnknownWorker, workerID, pool)
	}
	return nil
}

// Workers implements Store.
func (r *Redis) Workers(ctx context.Context, pool string, now int64) ([]WorkerInfo, error) {
	return AllWorkers(ctx, r, pool, now)
}
