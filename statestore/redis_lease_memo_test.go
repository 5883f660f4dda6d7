package statestore

import (
	"context"
	"testing"

	"github.com/redis/rueidis"
)

// TestRedisLeaseExpiryBound: release_expired skips its ZRANGEBYSCORE while now is below the node's bound on
// the earliest lease expiry (lib.lua MEMO.lx). A lease that reaches lx without passing through this
// library (a router of another build, keys moved by resharding or RESTORE: here written directly) is
// released at most LX_RECHECK_MS (1 s) after the bound was taken, never later; leases booked through the
// library keep the exact rule (the differential suites).
func TestRedisLeaseExpiryBound(t *testing.T) {
	rs, c := newInternalRedis(t, "lxm:")
	ctx := context.Background()
	cfg := DefaultPoolConfig(4)
	cfg.LeaseTTLMs = 3600000
	if err := rs.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	if err := rs.PutWorker(ctx, "p", WorkerSpec{WorkerID: "w0", URL: "http://x"}, 1000); err != nil {
		t.Fatal(err)
	}
	// The first route takes the bound at now 1000: lx empty, so 1000 + 1000 (its own lease expires later).
	if _, err := rs.Route(ctx, RouteRequest{Pool: "p", RequestID: "r1", ISL: 4, NowMs: 1000}); err != nil {
		t.Fatal(err)
	}
	lx := PoolKeys("lxm:", "p")[11]
	if err := c.Do(ctx, c.B().Zadd().Key(lx).ScoreMember().ScoreMember(1500, "ghost").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	held := func(now int64) bool {
		t.Helper()
		if _, err := rs.Done(ctx, "p", "nope", now); err != nil { // a lease call: runs release_expired
			t.Fatal(err)
		}
		_, err := c.Do(ctx, c.B().Zscore().Key(lx).Member("ghost").Build()).ToFloat64()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	if !held(1600) || !held(1999) {
		t.Fatal("a call below the bound (2000) ran the expiry scan")
	}
	if held(2000) {
		t.Fatal("the lease expired at 1500 is still in lx at now 2000: the bound lied more than 1 s")
	}
	if _, err := rs.Route(ctx, RouteRequest{Pool: "p", RequestID: "r2", ISL: 4, NowMs: 2000}); err != nil {
		t.Fatal(err)
	}
	// r1 expires at 3,601,000 exactly (the bound follows the earliest booked expiry once within 1 s of it).
	if n, err := c.Do(ctx, c.B().Zcard().Key(lx).Build()).AsInt64(); err != nil || n != 2 {
		t.Fatalf("lx holds %d leases (%v), want r1 and r2", n, err)
	}
	for _, now := range []int64{3600000, 3600999, 3601000} {
		if _, err := rs.Done(ctx, "p", "nope", now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Do(ctx, c.B().Zscore().Key(lx).Member("r1").Build()).ToFloat64(); !rueidis.IsRedisNil(err) {
		t.Fatalf("r1 (expiry 3601000) not released at now 3601000: %v", err)
	}
}
