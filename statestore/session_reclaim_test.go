package statestore

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/internal/testredis"
)

// TestSessionReclaim (defect 4): 2,000 distinct session ids with a 1 s TTL leave no bindings behind
// in either store once their TTL has passed and later routes have swept them (32 per call), and every
// decision on the way is the same in both stores.
func TestSessionReclaim(t *testing.T) {
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := NewRedis(c, RedisOptions{Name: "redis", Prefix: "sess:"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	mem := NewMemory()
	ctx := context.Background()
	cfg := DefaultPoolConfig(4)
	cfg.SessionAffinityTTLMs = 1000
	count := map[string]func() int{
		"memory": func() int {
			p, _ := mem.pool("default")
			p.mu.RLock()
			defer p.mu.RUnlock()
			return len(p.sessions)
		},
		"redis": func() int {
			n, err := c.Do(ctx, c.B().Hlen().Key(PoolKeys("sess:", "default")[12]).Build()).AsInt64()
			if err != nil {
				t.Fatal(err)
			}
			return int(n)
		},
	}
	stores := map[string]Store{"memory": mem, "redis": rs}
	for _, st := range stores {
		if err := st.PutPool(ctx, "default", cfg); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"w0", "w1"} {
			if err := st.PutWorker(ctx, "default", WorkerSpec{WorkerID: w, URL: "http://" + w}, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	const sessions = 2000
	decide := func(now int64, rid, session string) string {
		var got []string
		for _, name := range []string{"memory", "redis"} {
			d, err := stores[name].Route(ctx, RouteRequest{Pool: "default", RequestID: rid, SessionID: session, ISL: 8, NowMs: now})
			if err != nil {
				t.Fatalf("%s route %s: %v", name, rid, err)
			}
			if _, err := stores[name].Done(ctx, "default", rid, now); err != nil {
				t.Fatal(err)
			}
			got = append(got, d.WorkerID)
		}
		if got[0] != got[1] {
			t.Fatalf("route %s: memory chose %s, redis %s", rid, got[0], got[1])
		}
		return got[0]
	}
	for i := 0; i < sessions; i++ {
		decide(0, fmt.Sprintf("r%d", i), fmt.Sprintf("s%d", i))
	}
	for name, n := range count {
		if got := n(); got != sessions {
			t.Fatalf("%s holds %d bindings before the TTL, want %d", name, got, sessions)
		}
	}
	// Past every TTL: routes without a session sweep 32 expired bindings each.
	now := int64(1000)
	for i := 0; i < sessions/32+2; i++ {
		decide(now+int64(i), fmt.Sprintf("later%d", i), "")
	}
	for name, n := range count {
		if got := n(); got != 0 {
			t.Errorf("%s still holds %d session bindings after the TTL and %d routes", name, got, sessions/32+2)
		}
	}
	if n, err := c.Do(ctx, c.B().Zcard().Key(PoolKeys("sess:", "default")[20]).Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("redis idle-session index holds %d entries (%v), want 0", n, err)
	}
}
