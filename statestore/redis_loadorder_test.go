package statestore

import (
	"context"
	"strconv"
	"testing"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/redis/rueidis"
)

// TestRedisLoadOrderSkiplist: the load order's sorted sets (lz, lp) of a pool of short worker ids, which
// Redis would keep as listpacks (the slow case for the ZADD of every booking and release: lib.lua
// LZ.skiplist), are skiplists once a booking moved a member, again after the roster was rewritten, and
// the decisions are the memory store's all along (encoding only).
func TestRedisLoadOrderSkiplist(t *testing.T) {
	ctx := context.Background()
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rs, err := NewRedis(c, RedisOptions{Name: "redis", Prefix: "lo:"})
	if err != nil {
		t.Fatal(err)
	}
	keys := PoolKeys("lo:", "p")
	lz, lp := keys[21], keys[24]
	encoding := func(k string) string {
		v, err := c.Do(ctx, c.B().ObjectEncoding().Key(k).Build()).ToString()
		if err != nil {
			t.Fatalf("OBJECT ENCODING %s: %v", k, err)
		}
		return v
	}
	mem := NewMemory()
	stores := []Store{mem, rs}
	now := int64(1000)
	register := func(ids ...string) {
		for _, st := range stores {
			for _, id := range ids {
				if err := st.PutWorker(ctx, "p", WorkerSpec{WorkerID: id, URL: "http://" + id}, now); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	route := func(i int) {
		var got [2]Decision
		for k, st := range stores {
			d, err := st.Route(ctx, RouteRequest{Pool: "p", RequestID: "r" + strconv.Itoa(i), ISL: 64, Random: float64(i%7) / 7, NowMs: now})
			if err != nil {
				t.Fatal(err)
			}
			got[k] = d
		}
		if got[0].WorkerID != got[1].WorkerID || got[0].DPRank != got[1].DPRank {
			t.Fatalf("decision %d: memory %s/%d, redis %s/%d", i, got[0].WorkerID, got[0].DPRank, got[1].WorkerID, got[1].DPRank)
		}
	}
	for _, st := range stores {
		if err := st.PutPool(ctx, "p", DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
	}
	register("w0", "w1", "w2", "w3")
	if e := encoding(lz); e != "listpack" {
		t.Logf("lz after registration: %s (Redis configured for larger listpacks?)", e)
	}
	route(0)
	if encoding(lz) != "skiplist" || encoding(lp) != "skiplist" {
		t.Fatalf("after a booking: lz %s, lp %s; want skiplist", encoding(lz), encoding(lp))
	}
	for i := 1; i < 20; i++ {
		route(i)
	}
	// A roster rewrite (a registration) rewrites members; the next booking converts again if needed.
	register("w4")
	route(20)
	if encoding(lz) != "skiplist" || encoding(lp) != "skiplist" {
		t.Fatalf("after a registration and a booking: lz %s, lp %s; want skiplist", encoding(lz), encoding(lp))
	}
	for i := 21; i < 40; i++ {
		route(i)
	}
	n, err := c.Do(ctx, c.B().Zcard().Key(lz).Build()).AsInt64()
	if err != nil || n != 5 {
		t.Fatalf("lz holds %d members (%v); want the 5 ranks, no probe left", n, err)
	}
}
