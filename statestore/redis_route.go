package statestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/luascripts"
)

func seqBlob(seq []uint64) string {
	b := make([]byte, 8*len(seq))
	for i, s := range seq {
		binary.BigEndian.PutUint64(b[8*i:], s)
	}
	return string(b)
}

// overrideArg packs a request's overrides into route.lua's one override argument (lib.lua cfg_override):
// "" when it overrides nothing, else one value per overridable knob in knob table order, joined by ","
// ("" where the pool's value stands; fstr never writes a comma). One argument instead of one per knob:
// Redis makes a Lua string of every argument of every call.
func overrideArg(o *Overrides) string {
	if *o == (Overrides{}) {
		return ""
	}
	vals := make([]string, len(overridable))
	for i, k := range overridable {
		vals[i] = optF(*k.override(o))
	}
	return strings.Join(vals, ",")
}

func optF(v *float64) string {
	if v == nil {
		return ""
	}
	return fstr(*v)
}

// routeArgs builds route.lua's ARGV: 8 fixed values, the overrides (overrideArg), then the allowed and
// the excluded worker lists, each after its count.
func routeArgs(mode string, req *RouteRequest) []string {
	args := make([]string, 0, 12+len(req.AllowedWorkers)+len(req.ExcludedWorkers)) // + route's full-scan bound
	args = append(args, mode, istr(req.NowMs), req.RequestID, seqBlob(req.SeqHashes), istr(req.ISL), req.SessionID,
		req.PinnedWorker, fstr(req.Random), overrideArg(&req.Overrides))
	args = append(args, strconv.Itoa(len(req.AllowedWorkers)))
	args = append(args, req.AllowedWorkers...)
	args = append(args, strconv.Itoa(len(req.ExcludedWorkers)))
	return append(args, req.ExcludedWorkers...)
}

// preValidate runs the checks of validateRoute that need no pool config, with the exact texts the memory
// store produces. Checks that need the config (isl and block count limits) run inside route.lua; when
// they fail, or when a later check fails, the pool config is read and validateRoute builds the error.
func (r *Redis) preValidate(ctx context.Context, req *RouteRequest) error {
	loose := PoolConfig{BlockSize: 1, MaxPromptTokens: 1<<62 - 1}
	if err := validateRoute(req, loose); err != nil {
		return r.exactInvalid(ctx, req)
	}
	return nil
}

// exactInvalid reads the pool config and reports validateRoute's error for it.
func (r *Redis) exactInvalid(ctx context.Context, req *RouteRequest) error {
	cfg, err := r.GetPool(ctx, req.Pool)
	if err != nil {
		return err
	}
	if err := validateRoute(req, cfg); err != nil {
		return err
	}
	return fmt.Errorf("%w: request outside the pool's limits", ErrInvalid)
}

func noEligible(pool string, arr []rueidis.RedisMessage) *NoEligibleError {
	e := &NoEligibleError{Pool: pool, Reasons: map[string]int{}}
	for i := 0; i+1 < len(arr); i += 2 {
		e.Reasons[msgStr(arr[i])] = int(msgInt(arr[i+1]))
	}
	return e
}

// Route implements Store.
func (r *Redis) Route(ctx context.Context, req RouteRequest) (Decision, error) {
	if err := CheckID("pool", req.Pool); err != nil {
		return Decision{}, unknownPool(req.Pool)
	}
	if err := r.preValidate(ctx, &req); err != nil {
		return Decision{}, err
	}
	args := append(routeArgs("route", &req), istr(int64(fullScanMaxRanks)))
	if len(req.Releases) > 0 {
		args = append(append(args, strconv.Itoa(len(req.Releases))), req.Releases...)
	}
	arr, err := r.exec(ctx, luascripts.Route, req.Pool, args)
	if err != nil {
		return Decision{}, err
	}
	switch msgStr(arr[0]) {
	case "unknown_pool":
		return Decision{}, unknownPool(req.Pool)
	case "invalid":
		return Decision{}, r.exactInvalid(ctx, &req)
	case "conflict":
		return Decision{}, fmt.Errorf("%w: request %q already has an active lease", ErrConflict, req.RequestID)
	case "noelig":
		return Decision{}, noEligible(req.Pool, arr[1:])
	case "ok":
		if len(arr) > 8 && msgInt(arr[8]) == 1 {
			r.fastRoutes.Add(1)
		}
		return Decision{RequestID: req.RequestID, WorkerID: msgStr(arr[1]), DPRank: int(msgInt(arr[2])), URL: msgStr(arr[3]),
			OverlapBlocks: int(msgInt(arr[4])), RequiredBlocks: msgInt(arr[5]), Cost: msgFloat(arr[6]), SessionHit: msgInt(arr[7]) == 1}, nil
	}
	return Decision{}, fmt.Errorf("statestore: redis route: unexpected reply %q", msgStr(arr[0]))
}

// Overlap implements Store.
func (r *Redis) Overlap(ctx context.Context, pool string, seq []uint64, now int64) ([]Score, error) {
	req := RouteRequest{Pool: pool, SeqHashes: seq, NowMs: now}
	arr, err := r.exec(ctx, luascripts.Route, pool, routeArgs("query", &req))
	if err != nil {
		return nil, err
	}
	if msgStr(arr[0]) == "unknown_pool" {
		return nil, unknownPool(pool)
	}
	var out []Score
	for _, m := range arr[1:] {
		v, _ := m.ToArray()
		out = append(out, Score{WorkerID: msgStr(v[0]), DPRank: int(msgInt(v[1])), Blocks: int(msgInt(v[2]))})
	}
	return out, nil
}

// lease runs a lease operation on pool, or, with pool "", on every pool of the registry at once (the id
// names no pool): it reports true when one of them held the lease. A pool that fails (its node down, its
// layout another) fails the call only when no other pool held the lease: a request booked in a healthy
// pool is released even while another pool's slots fail over, and a dead node's timeout, paid in
// parallel, does not use up the request's deadline before the pool that holds the lease is asked.
func (r *Redis) lease(ctx context.Context, op, pool, id string, now int64) (bool, error) {
	args := []string{op, istr(now), id}
	held := func(p string) (bool, error) {
		arr, err := r.exec(ctx, luascripts.Lease, p, args)
		if err != nil {
			return false, err
		}
		if msgStr(arr[0]) == "unknown_pool" && pool != "" { // asked for by name; a registry pool gone since holds nothing
			return false, unknownPool(pool)
		}
		return msgStr(arr[0]) == "ok" && msgInt(arr[1]) == 1, nil
	}
	if pool != "" {
		return held(pool)
	}
	pools, err := r.poolNames(ctx)
	if err != nil {
		return false, err
	}
	found := make([]bool, len(pools))
	errs := make([]error, len(pools))
	var wg sync.WaitGroup
	for i, p := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			found[i], errs[i] = held(p)
		}()
	}
	wg.Wait()
	if slices.Contains(found, true) {
		return true, nil
	}
	for _, err := range errs {
		if err != nil {
			return false, err // the lease may be in that pool: not "not found"
		}
	}
	return false, nil
}

// PrefillDone implements Store.
func (r *Redis) PrefillDone(ctx context.Context, pool, id string, now int64) (bool, error) {
	return r.lease(ctx, "prefill_done", pool, id, now)
}

// Done implements Store.
func (r *Redis) Done(ctx context.Context, pool, id string, now int64) (bool, error) {
	return r.lease(ctx, "done", pool, id, now)
}

// RenewLease implements Store.
func (r *Redis) RenewLease(ctx context.Context, pool, id string, now int64) (bool, error) {
	return r.lease(ctx, "renew", pool, id, now)
}

var _ = errors.New
