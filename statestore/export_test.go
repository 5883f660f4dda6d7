package statestore

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// SetApplyWorkBudget sets apply_events' work budget (Redis commands per call) for a test and returns the
// restore function. Tests that use it must not run in parallel with other Redis tests of the package.
func SetApplyWorkBudget(n int) (restore func()) {
	old := applyWorkBudget
	applyWorkBudget = n
	return func() { applyWorkBudget = old }
}

// SetFullScanMaxRanks sets route.lua's full-scan bound (ranks; 0: the load-order walk wherever it qualifies)
// for a test and returns the restore function. Tests that use it must not run in parallel with other Redis
// tests of the package.
func SetFullScanMaxRanks(n int) (restore func()) {
	old := fullScanMaxRanks
	fullScanMaxRanks = n
	return func() { fullScanMaxRanks = old }
}

// SetExplainPaging sets a Redis store's explain page size (candidates per call; 0 = ExplainPageCandidates)
// and a hook run before each page after the first (nil: none), so tests page small pools and change the
// roster between two pages deterministically.
func SetExplainPaging(r *Redis, page int, between func(page int)) {
	r.explainPage, r.explainBetween = page, between
}

// SetEngineMapLoad sets the engine-map load (blocks per bucket before a split) for a test and returns the
// restore function. Tests that use it must not run in parallel with other Redis tests of the package.
func SetEngineMapLoad(n float64) (restore func()) {
	old := engineMapLoad
	engineMapLoad = n
	return func() { engineMapLoad = old }
}

// SetEventIndexLoad sets the event-index load (entries per bucket before a split) for a test and returns
// the restore function. Tests that use it must not run in parallel with other Redis tests of the package.
func SetEventIndexLoad(n float64) (restore func()) {
	old := eventIndexLoad
	eventIndexLoad = n
	return func() { eventIndexLoad = old }
}

// EngineMapBuckets returns, for each slot of pool whose engine map records its bucket count (layout 4's
// slots), that count (the fence fields gn<slot>), and the event index's under "e" (sc field egn).
func EngineMapBuckets(ctx context.Context, r *Redis, pool string) (map[string]int, error) {
	keys := PoolKeys(r.prefix, pool)
	fence, err := r.c.Do(ctx, r.c.B().Hgetall().Key(keys[5]).Build()).AsStrMap()
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for k, v := range fence {
		if n, err := strconv.Atoi(v); err == nil && strings.HasPrefix(k, "gn") {
			out[strings.TrimPrefix(k, "gn")] = n
		}
	}
	egn, err := r.c.Do(ctx, r.c.B().Hget().Key(keys[6]).Field("egn").Build()).AsInt64()
	if err == nil {
		out["e"] = int(egn)
	} else if !rueidis.IsRedisNil(err) {
		return nil, err
	}
	return out, nil
}

// LegacyPoolTag is layouts 1–5's hash tag of a pool (the hex of its name), for tests that write such pools.
func LegacyPoolTag(pool string) string { return legacyPoolTag(pool) }
