package testredis

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

func newClient(t *testing.T, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:  addrs,
		DisableCache: true,
	})
	if err != nil {
		t.Fatalf("rueidis.NewClient(%v): %v", addrs, err)
	}
	t.Cleanup(c.Close)
	return c
}

func ping(ctx context.Context, t *testing.T, c rueidis.Client) {
	t.Helper()
	got, err := c.Do(ctx, c.B().Ping().Build()).ToString()
	if err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v", got, err)
	}
}

func TestServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := Start(t)
	if want := "redis://" + s.Addr(); s.URL() != want {
		t.Fatalf("URL() = %q, want %q", s.URL(), want)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q", s.Addr())
	}
	c := newClient(t, s.Addr())
	ping(ctx, t, c)

	// A loaded script and a key exist before the restart...
	script := rueidis.NewLuaScript("return 42")
	if v, err := script.Exec(ctx, c, nil, nil).AsInt64(); err != nil || v != 42 {
		t.Fatalf("script = %d, %v", v, err)
	}
	if err := c.Do(ctx, c.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	sha := strings.TrimSpace(mustString(t, c.Do(ctx, c.B().ScriptLoad().Script("return 7").Build())))

	port := s.Port()
	start := time.Now()
	s.Restart(t)
	t.Logf("restart took %v", time.Since(start))
	if s.Port() != port || !s.Running() {
		t.Fatalf("after Restart: port %d (was %d), running %v", s.Port(), port, s.Running())
	}

	// ...and are gone after it; the same client reconnects by itself.
	var err error
	for i := 0; i < 50; i++ { // the first command may hit the dropped connection
		if err = c.Do(ctx, c.B().Ping().Build()).Error(); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("PING after restart: %v", err)
	}
	if err := c.Do(ctx, c.B().Get().Key("k").Build()).Error(); !rueidis.IsRedisNil(err) {
		t.Fatalf("GET k after restart: err = %v, want nil reply", err)
	}
	exists, err := c.Do(ctx, c.B().ScriptExists().Sha1(sha).Build()).AsIntSlice()
	if err != nil || len(exists) != 1 || exists[0] != 0 {
		t.Fatalf("SCRIPT EXISTS after restart = %v, %v; want [0]", exists, err)
	}
	// NewLuaScript falls back to EVAL on NOSCRIPT.
	if v, err := script.Exec(ctx, c, nil, nil).AsInt64(); err != nil || v != 42 {
		t.Fatalf("script after restart = %d, %v", v, err)
	}

	s.Stop()
	s.Stop() // idempotent
	if s.Running() {
		t.Fatal("still running after Stop")
	}
	if _, err := command(s.Addr(), "PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
}

func TestServerExtraArgs(t *testing.T) {
	s := Start(t, "--maxmemory", "12345678")
	info, err := command(s.Addr(), "INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	if v := infoField(info, "maxmemory"); v != "12345678" {
		t.Fatalf("maxmemory = %q", v)
	}
}

func TestCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	cl := StartCluster(t)
	t.Logf("cluster of %d primaries ready in %v: %s", ClusterSize, time.Since(start), cl.URL())

	addrs := cl.Addrs()
	if len(addrs) != ClusterSize {
		t.Fatalf("Addrs() = %v", addrs)
	}
	if want := "redis://" + strings.Join(addrs, ","); cl.URL() != want || cl.Seeds() != strings.Join(addrs, ",") {
		t.Fatalf("URL() = %q, Seeds() = %q", cl.URL(), cl.Seeds())
	}

	c := newClient(t, addrs...)
	// rueidis discovers the cluster: keys spread over all three nodes work.
	for i := 0; i < 30; i++ {
		k := fmt.Sprintf("key-%d", i)
		if err := c.Do(ctx, c.B().Set().Key(k).Value(k).Build()).Error(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		if v, err := c.Do(ctx, c.B().Get().Key(k).Build()).ToString(); err != nil || v != k {
			t.Fatalf("GET %s = %q, %v", k, v, err)
		}
	}
	for _, n := range cl.Nodes() {
		nc := newClient(t, n.Addr())
		ping(ctx, t, nc)
		keys, err := command(n.Addr(), "DBSIZE")
		if err != nil || keys == "0" {
			t.Fatalf("node %s DBSIZE = %q, %v (keys not spread?)", n.Addr(), keys, err)
		}
	}
	// A script over one hash tag runs on the owning node.
	script := rueidis.NewLuaScript("return redis.call('INCR', KEYS[1]) + redis.call('INCR', KEYS[2])")
	v, err := script.Exec(ctx, c, []string{"{pool}:a", "{pool}:b"}, nil).AsInt64()
	if err != nil || v != 2 {
		t.Fatalf("script = %d, %v", v, err)
	}
}

func mustString(t *testing.T, r rueidis.RedisResult) string {
	t.Helper()
	s, err := r.ToString()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSentinel: three sentinels agree on the primary and see its replica; the URL names them all.
func TestSentinel(t *testing.T) {
	g := StartSentinel(t, SentinelOptions{Replicas: 1, Sentinels: 3})
	if got := g.MasterAddr(); got != g.Primary.Addr() {
		t.Fatalf("sentinel names primary %q, want %q", got, g.Primary.Addr())
	}
	if u := g.URL(); !strings.HasPrefix(u, "redis-sentinel://") || strings.Count(u, ",") != 2 || !strings.HasSuffix(u, "/"+SentinelMaster) {
		t.Fatalf("URL %q", u)
	}
}
