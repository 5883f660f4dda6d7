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
	before := rs.fastRoutes.Load()
	for i := 0; i < 60; i++ {
		req := RouteRequest{Pool: "p", RequestID: "y" + strconv.Itoa(i), ISL: int64(4 * (i % 2)), Random: float64(i%13) / 13, NowMs: 3}
		ex, err := rs.Explain(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		d, err := rs.Route(ctx, req)
		if err != nil || ex.Decision == nil || d != *ex.Decision {
			t.Fatalf("route %d after migrate: %+v, %v; the full scan %+v", i, d, err, ex.Decision)
		}
		if i%4 == 0 {
			if _, err := rs.Done(ctx, "p", req.RequestID, 3); err != nil {
				t.Fatal(err)
			}
		}
		checkLoadOrder(t, rs, "p")
	}
	if fast := rs.fastRoutes.Load() - before; fast < 50 { // no holders: every fast decision sizes groups
		t.Fatalf("%d of 60 decisions took the fast path: the group sizes were not exercised", fast)
	}
}
