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

// MaxBlocksPerCall bounds the blocks of one apply_events call: a batch is split at event boundaries, and
// a larger event into pieces (applyLarge). Why 64: SPEC §8 wants every call under 1 ms of Redis time, and
// a stored block costs ~7–9 µs of Redis CPU (docs/PERFORMANCE.md "Per-call bound of ingest"): 512-block
// calls took 4.4 ms (p50) on the loaded box, 64-block calls 0.7 ms. Smaller calls cost more per block
// (the per-call fence, worker record and sweep are paid 8× as often, and engine-map writes group less:
// 9.0 → 12 µs per block on the same loaded box); the bound on every call is worth that.
const MaxBlocksPerCall = 64

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

// PutPool implements Store.
func (r *Redis) PutPool(ctx context.Context, pool string, cfg PoolConfig) error {
	if err := CheckID("pool", pool); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	args := make([]string, 0, 2*len(knobTable)+8)
	for _, k := range knobTable { // cfg order, "bs" first (put_pool.lua reads it as ARGV[2])
		args = append(args, k.Short, k.encode(&cfg))
	}
	args = append(args, gatewayFields(cfg)...)
	if err := r.checkPoolLimit(ctx, pool); err != nil {
		return err
	}
	arr, err := r.exec(ctx, luascripts.PutPool, pool, args)
	if err != nil {
		return err
	}
	if msgStr(arr[0]) == "conflict" {
		return fmt.Errorf("%w: pool %q has workers; block_size %d cannot change to %d", ErrConflict, pool, msgInt(arr[1]), cfg.BlockSize)
	}
	if err := r.c.Do(ctx, r.c.B().Sadd().Key(PoolsKey(r.prefix)).Member(pool).Build()).Error(); err != nil {
		return r.wrap("put_pool", err)
	}
	return nil
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
	m, err := r.c.Do(ctx, r.c.B().Hgetall().Key(PoolKeys(r.prefix, pool)[0]).Build()).AsStrMap()
	if err != nil {
		return PoolConfig{}, "", r.wrap("get_pool", err)
	}
	if len(m) == 0 {
		return PoolConfig{}, "", unknownPool(pool)
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
		cnt, err := r.c.Do(ctx, r.c.B().Hlen().Key(PoolKeys(r.prefix, n)[2]).Build()).AsInt64()
		if err != nil {
			return nil, r.wrap("pools", err)
		}
		out = append(out, PoolInfo{Name: n, Config: cfg, Workers: int(cnt)})
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
		istr(spec.TotalKVBlocks), istr(spec.MaxNumBatchedTokens), kve, strconv.Itoa(r.limits.maxWorkers())})
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
