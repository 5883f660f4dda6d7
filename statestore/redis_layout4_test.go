package statestore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestRedisLayout4Migrate: a pool written by layout 4 (this layout's keys plus lc, each load's member
// count in lz, which layouts 3-4 wrote on every booking and release) answers layout_mismatch to routes
// and releases; `pool migrate` deletes lc and records this layout in one call; the load order is then
// exactly what the scripts maintain and routing decides what the full scan decides, including groups
// whose loads share a score (decode_active_request_weight 0: the request count does not score), which
// route now sizes with ZCOUNT and a binary search instead of lc.
func TestRedisLayout4Migrate(t *testing.T) {
	t.Cleanup(SetFullScanMaxRanks(0)) // its migrated pool is small; the load-order walk is what it checks
	rs, c := newInternalRedis(t, "l4:")
	ctx := context.Background()
	cfg := DefaultPoolConfig(4)
	cfg.DecodeActiveRequestWeight, cfg.PrefillLoadScale = 0, 0 // loads (0, d, r) of one d share a score
	cfg.LeaseTTLMs = 3600000
	if err := rs.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	for w := 0; w < 40; w++ {
		if err := rs.PutWorker(ctx, "p", WorkerSpec{WorkerID: "w" + strconv.Itoa(w), URL: "http://x", DPSize: 2}, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 150; i++ { // 150 requests on 80 ranks, then a third of them done: several tied groups
		if _, err := rs.Route(ctx, RouteRequest{Pool: "p", RequestID: "r" + strconv.Itoa(i), ISL: int64(4 * (i % 3)), Random: float64(i%11) / 11, NowMs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 150; i += 3 {
		if _, err := rs.Done(ctx, "p", "r"+strconv.Itoa(i), 2); err != nil {
			t.Fatal(err)
		}
	}
	checkLoadOrder(t, rs, "p")

	// Make it layout 4's pool: lc counting lz's members by load, cfg layout 4.
	keys := PoolKeys("l4:", "p")
	members, err := c.Do(ctx, c.B().Zrange().Key(keys[21]).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil || len(members) != 80 {
		t.Fatalf("lz: %d members, %v", len(members), err)
	}
	for _, m := range members {
		if err := c.Do(ctx, c.B().Hincrby().Key(keys[22]).Field(m[:24]).Increment(1).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(ctx, c.B().Hset().Key(keys[0]).FieldValue().FieldValue("layout", "4").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err = rs.Route(ctx, RouteRequest{Pool: "p", RequestID: "x", ISL: 4, NowMs: 3})
	var lm *LayoutMismatchError
	if !errors.As(err, &lm) || !strings.Contains(err.Error(), "layout 4") {
		t.Fatalf("route on a layout-4 pool: %v (want layout_mismatch naming layout 4)", err)
	}
	if _, err := rs.Done(ctx, "p", "r1", 3); !errors.As(err, &lm) {
		t.Fatalf("done on a layout-4 pool: %v (want layout_mismatch)", err)
	}

	if from, err := rs.MigratePool(ctx, "p"); err != nil || from != "4" {
		t.Fatalf("migrate: from %q, %v", from, err)
	}
	checkLoadOrder(t, rs, "p") // lc is gone, lz untouched
	groups := map[string]bool{}
	for _, m := range members {
		groups[m[:24]] = true
	}
	if len(groups) < 3 {
		t.Fatalf("only %d load groups: the test needs several sharing a score", len(groups))
	}
	if fast := routesAgainstFullScan(t, rs, "y", 60, 3, 4); fast < 50 { // no holders: every fast decision sizes groups
		t.Fatalf("%d of 60 decisions took the fast path: the group sizes were not exercised", fast)
	}
}

// TestRedisLayout6Migrate: a pool written by layout 6 (this layout's keys, its load orders lz and lp kept
// whatever its size, no cfg 'lzk') answers layout_mismatch; `pool migrate` records layout 7 with 'lzk' set
// in one call, so the small pool goes on keeping its complete load orders (lib.lua "Load orders only where
// a route may walk"): bookings and releases keep them exact at the default full-scan bound, and with the
// bound at 0 every walked decision equals the full scan's.
func TestRedisLayout6Migrate(t *testing.T) {
	rs, c := newInternalRedis(t, "l6:")
	ctx := context.Background()
	cfg := DefaultPoolConfig(4)
	cfg.LeaseTTLMs = 3600000
	restore := SetFullScanMaxRanks(0) // layout 6 kept lz and lp for a pool of any size
	if err := rs.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	for w := 0; w < 10; w++ {
		if err := rs.PutWorker(ctx, "p", WorkerSpec{WorkerID: "w" + strconv.Itoa(w), URL: "http://x", DPSize: 2}, 1); err != nil {
			t.Fatal(err)
		}
	}
	restore()
	for i := 0; i < 30; i++ {
		if _, err := rs.Route(ctx, RouteRequest{Pool: "p", RequestID: "r" + strconv.Itoa(i), ISL: int64(4 * (i % 3)), Random: float64(i%11) / 11, NowMs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	checkLoadOrder(t, rs, "p")
	keys := PoolKeys("l6:", "p")
	if err := c.Do(ctx, c.B().Hdel().Key(keys[0]).Field("lzk").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Hset().Key(keys[0]).FieldValue().FieldValue("layout", "6").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err := rs.Route(ctx, RouteRequest{Pool: "p", RequestID: "x", ISL: 4, NowMs: 3})
	var lm *LayoutMismatchError
	if !errors.As(err, &lm) || !strings.Contains(err.Error(), "layout 6") {
		t.Fatalf("route on a layout-6 pool: %v (want layout_mismatch naming layout 6)", err)
	}
	if err := rs.PutWorker(ctx, "p", WorkerSpec{WorkerID: "w0", URL: "http://x", DPSize: 2}, 3); !errors.As(err, &lm) {
		t.Fatalf("put_worker on a layout-6 pool: %v (want layout_mismatch)", err)
	}
	if from, err := rs.MigratePool(ctx, "p"); err != nil || from != "6" {
		t.Fatalf("migrate: from %q, %v", from, err)
	}
	if v, err := c.Do(ctx, c.B().Hget().Key(keys[0]).Field("lzk").Build()).ToString(); err != nil || v != "1" {
		t.Fatalf("cfg lzk after migrate: %q, %v (want 1: the pool keeps its load orders)", v, err)
	}
	checkLoadOrder(t, rs, "p")
	for i := 0; i < 30; i++ { // the default bound: full scans, and every booking and release moves lz
		if _, err := rs.Route(ctx, RouteRequest{Pool: "p", RequestID: "y" + strconv.Itoa(i), ISL: 4, Random: float64(i%7) / 7, NowMs: 3}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if _, err := rs.Done(ctx, "p", "r"+strconv.Itoa(i), 3); err != nil {
				t.Fatal(err)
			}
		}
	}
	checkLoadOrder(t, rs, "p")
	t.Cleanup(SetFullScanMaxRanks(0))
	if fast := routesAgainstFullScan(t, rs, "z", 30, 4, 4); fast == 0 {
		t.Fatal("no decision took the load-order walk after migrate (bound 0)")
	}
}

// routesAgainstFullScan makes n decisions (request ids prefix + i, at nowMs) on pool "p" of rs, each equal
// to Explain's (the full scan), every doneEvery-th one released, checking the load order after each; it
// returns how many took the load-order walk.
func routesAgainstFullScan(t *testing.T, rs *Redis, prefix string, n int, nowMs int64, doneEvery int) int64 {
	t.Helper()
	ctx := context.Background()
	before := rs.fastRoutes.Load()
	for i := 0; i < n; i++ {
		req := RouteRequest{Pool: "p", RequestID: prefix + strconv.Itoa(i), ISL: int64(4 * (i % 2)), Random: float64(i%13) / 13, NowMs: nowMs}
		ex, err := rs.Explain(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		d, err := rs.Route(ctx, req)
		if err != nil || ex.Decision == nil || d != *ex.Decision {
			t.Fatalf("route %d after migrate: %+v, %v; the full scan %+v", i, d, err, ex.Decision)
		}
		if i%doneEvery == 0 {
			if _, err := rs.Done(ctx, "p", req.RequestID, nowMs); err != nil {
				t.Fatal(err)
			}
		}
		checkLoadOrder(t, rs, "p")
	}
	return rs.fastRoutes.Load() - before
}
