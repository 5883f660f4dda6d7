package statestore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestParseRedisURLSentinel: the redis-sentinel:// forms and their errors.
func TestParseRedisURLSentinel(t *testing.T) {
	opt, name, err := statestore.ParseRedisURL("redis-sentinel://u:p@h1:26379,h2:26379, h3:26379/mymaster/2?sentinel_password=sp")
	if err != nil {
		t.Fatal(err)
	}
	if got := opt.InitAddress; len(got) != 3 || got[0] != "h1:26379" || got[2] != "h3:26379" {
		t.Fatalf("addresses %v", got)
	}
	if opt.Sentinel.MasterSet != "mymaster" || opt.SelectDB != 2 || opt.Username != "u" || opt.Password != "p" ||
		opt.Sentinel.Password != "sp" || opt.Sentinel.TopologyRefreshInterval <= 0 || opt.TLSConfig != nil {
		t.Fatalf("options %+v", opt)
	}
	if name != "redis-sentinel://h1:26379,h2:26379,h3:26379/mymaster" {
		t.Fatalf("display name %q (must name the sentinels and master, never the password)", name)
	}
	opt, _, err = statestore.ParseRedisURL("rediss-sentinel://h1:26379/m")
	if err != nil || opt.TLSConfig == nil || opt.Sentinel.TLSConfig == nil || opt.Sentinel.MasterSet != "m" || opt.SelectDB != 0 {
		t.Fatalf("rediss-sentinel: %+v, %v", opt, err)
	}
	for _, bad := range []string{
		"redis-sentinel://h1:26379",         // no master
		"redis-sentinel://h1:26379/",        // empty master
		"redis-sentinel:///m",               // no address
		"redis-sentinel://h1/m",             // no port
		"redis-sentinel://h1:26379/m/x",     // bad db
		"redis-sentinel://h1:26379/m?foo=1", // unknown parameter
		"redisx-sentinel://h1:26379/m",      // unknown scheme
	} {
		if _, _, err := statestore.ParseRedisURL(bad); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

// TestRedisSentinelFailover: a store opened with a redis-sentinel:// URL writes to the primary the
// sentinel names; after the primary is killed and the replica promoted, the same store object routes
// again on the promoted replica (with the state it replicated), without being reopened.
func TestRedisSentinelFailover(t *testing.T) {
	g := testredis.StartSentinel(t, testredis.SentinelOptions{Replicas: 1, Sentinels: 1})
	st, err := statestore.Open(g.URL(), statestore.OpenOptions{Fresh: true, RedisTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	setupPool(t, st, "default", statestore.DefaultPoolConfig(4), "w0", "w1")
	if _, err := st.Route(ctx, statestore.RouteRequest{Pool: "default", RequestID: "a", ISL: 8, NowMs: 1}); err != nil {
		t.Fatal(err)
	}
	g.WaitReplicated(t)
	old := g.Primary.Addr()
	g.Primary.Stop()
	promoted := g.WaitFailover(t, old)
	t.Logf("failover %s → %s", old, promoted)
	deadline := time.Now().Add(60 * time.Second)
	var d statestore.Decision
	for attempt := 0; ; attempt++ {
		d, err = st.Route(ctx, statestore.RouteRequest{Pool: "default", RequestID: "b", ISL: 8, NowMs: 2})
		if err == nil {
			t.Logf("routed on the promoted replica after %d failed attempts", attempt)
			break
		}
		if !errors.Is(err, statestore.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("after failover: %v (code %s)", err, statestore.ErrorCode(err))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// "a" still holds w0 (replicated before the failover), so "b" goes to w1.
	if d.WorkerID != "w1" {
		t.Fatalf("route after failover chose %q, want w1 (the replicated lease on w0 must count)", d.WorkerID)
	}
}
