package statestore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/luascripts"
)

// Calling the operations: FCALL of the layout's library functions (luascripts.Library).
//
// Why Functions: an EVALSHA script carried lib.lua, whose ~40 definitions (closures, tables, constants)
// ran again on every call; a library runs them once per FUNCTION LOAD. Measured on this repo's 2-core
// box: an EVALSHA of lib.lua + `return` costs 4.1 µs more Redis CPU than an empty EVALSHA pipelined, and
// ~20 µs more per unpipelined call under load (cold caches); see docs/REDIS.md "Functions".
//
// Loading: lazily. A node without the library answers "ERR Function not found"; the store then loads
// it on every node (FUNCTION LOAD REPLACE; a replica's READONLY refusal is ignored: it receives the
// library from its primary) and sends the call again, once. That retry is safe for every operation,
// booking ones included, because the error proves the function did not run. A restarted Redis without
// persistence or a failover to a node that never had it recovers on its next call.

// errFunctionMissing reports the reply of an FCALL whose function the node does not have.
func errFunctionMissing(err error) bool {
	var re *rueidis.RedisError
	return errors.As(err, &re) && strings.Contains(re.Error(), "Function not found")
}

// LoadLibrary loads this layout's library on every node (FUNCTION LOAD REPLACE). Calls do it by
// themselves when a node lacks it; operators and tests may call it ahead.
func (r *Redis) LoadLibrary(ctx context.Context) error {
	var last error
	loaded := 0
	for _, n := range r.c.Nodes() {
		err := n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(r.lib).Build()).Error()
		var re *rueidis.RedisError
		switch {
		case err == nil:
			loaded++
		case errors.As(err, &re) && strings.HasPrefix(re.Error(), "READONLY"):
			// a replica: the library reaches it through replication
		default:
			last = err
		}
	}
	if loaded == 0 && last == nil {
		last = errors.New("no node accepted FUNCTION LOAD")
	}
	if last != nil {
		return r.wrap("function load", last)
	}
	return nil
}

// call sends one operation: FCALL of its function, or the RouteScript override's EVALSHA.
func (r *Redis) call(ctx context.Context, s luascripts.Script, keys, args []string) rueidis.RedisResult {
	if s.Name == luascripts.Route.Name && r.route != nil {
		return r.route.Exec(ctx, r.c, keys, args)
	}
	if s.ReadOnly {
		return r.c.Do(ctx, r.c.B().FcallRo().Function(s.Function()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
	}
	return r.c.Do(ctx, r.c.B().Fcall().Function(s.Function()).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
}

// exec runs one operation on pool's keys. A missing library is loaded and the call sent again once (the
// function did not run). A connection error is retried once only for idempotent operations: a lost reply
// may hide an applied booking. A {'layout_mismatch', found} reply becomes a *LayoutMismatchError.
func (r *Redis) exec(ctx context.Context, s luascripts.Script, pool string, args []string) ([]rueidis.RedisMessage, error) {
	keys := r.keys.get(s, r.prefix, pool)
	arr, err := r.call(ctx, s, keys, args).ToArray()
	retried, loaded := false, false
	for err != nil && ctx.Err() == nil {
		switch {
		case !loaded && errFunctionMissing(err):
			loaded = true
			if lerr := r.LoadLibrary(ctx); lerr != nil {
				return nil, lerr
			}
		case !retried && s.Idempotent && isConnError(err):
			retried = true
		default:
			return nil, r.wrap(s.Name, err)
		}
		arr, err = r.call(ctx, s, keys, args).ToArray()
	}
	if err != nil {
		return nil, r.wrap(s.Name, err)
	}
	if len(arr) == 0 {
		return nil, fmt.Errorf("statestore: redis %s: empty reply", s.Name)
	}
	switch msgStr(arr[0]) {
	case "layout_mismatch":
		if len(arr) > 1 {
			return nil, &LayoutMismatchError{Pool: pool, Found: msgStr(arr[1]), Want: fmt.Sprint(luascripts.Layout)}
		}
	case "unknown_pool": // a pool layouts 1–5 wrote under their tag is a layout mismatch, never a miss
		if err := r.legacyMismatch(ctx, pool); err != nil {
			return nil, err
		}
	}
	return arr, nil
}
