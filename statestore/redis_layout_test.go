package statestore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// writeLayout1Pool declares pool with one worker w0 through the layout-1 scripts (testdata/layout1, EVAL),
// as a router of that version did.
func writeLayout1Pool(t *testing.T, addr, prefix, pool string, cfg statestore.PoolConfig) {
	t.Helper()
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	script := func(name string) *rueidis.Lua {
		lib, err := os.ReadFile("testdata/layout1/lib.lua")
		if err != nil {
			t.Fatal(err)
		}
		body, err := os.ReadFile("testdata/layout1/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		return rueidis.NewLuaScript(string(lib) + "\n" + string(body))
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	kve := "0"
	if cfg.KVEvents {
		kve = "1"
	}
	knobs := []string{"bs", strconv.Itoa(cfg.BlockSize), "osc", f(cfg.OverlapScoreCredit), "hw", f(cfg.HostCacheHitWeight),
		"dw", f(cfg.DiskCacheHitWeight), "pls", f(cfg.PrefillLoadScale), "decay", f(cfg.OverlapScoreCreditDecay),
		"rw", f(cfg.DecodeActiveRequestWeight), "temp", f(cfg.Temperature), "bpf", f(cfg.BusyPrefillFraction),
		"bdf", f(cfg.BusyDecodeFraction), "kve", kve, "attl", i(cfg.ApproxTTLMs), "pttl", i(cfg.PredictedTTLMs),
		"sttl", i(cfg.SessionAffinityTTLMs), "lttl", i(cfg.LeaseTTLMs), "wttl", i(cfg.WorkerTTLMs),
		"mpt", i(cfg.MaxPromptTokens), "ua", i(cfg.UnhealthyAfter), "ubo", i(cfg.UnhealthyBackoffMs)}
	keys := statestore.PoolKeys(prefix, pool)
	if err := script("put_pool").Exec(ctx, c, keys, knobs).Error(); err != nil {
		t.Fatal(err)
	}
	if err := script("put_worker").Exec(ctx, c, keys, []string{"1", "w0", "http://w0", "1", "1000", "8192", "-1", "64"}).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Sadd().Key(statestore.PoolsKey(prefix)).Member(pool).Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// checkMismatch asserts err is the typed layout_mismatch naming both versions and the fix.
func checkMismatch(t *testing.T, op string, err error) {
	t.Helper()
	var lm *statestore.LayoutMismatchError
	if !errors.As(err, &lm) || !errors.Is(err, statestore.ErrLayoutMismatch) || !errors.Is(err, statestore.ErrConflict) {
		t.Fatalf("%s on a layout-1 pool: %v, want a *LayoutMismatchError", op, err)
	}
	if code := statestore.ErrorCode(err); code != "layout_mismatch" {
		t.Errorf("%s: code %q", op, code)
	}
	msg := err.Error()
	for _, want := range []string{"key layout 1", "reads layout 3", "pool migrate", "pool recreate"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q does not say %q", op, msg, want)
		}
	}
}

// routeW0 stores a 4-block chain on w0 (after registering w1 as a rival) and routes it: w0 must win on overlap.
func routeW0(t *testing.T, st statestore.Store, pool string, now int64) {
	t.Helper()
	ctx := context.Background()
	for _, w := range []string{"w0", "w1"} {
		if err := st.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: w, URL: "http://" + w}, now); err != nil {
			t.Fatal(err)
		}
	}
	local := []uint64{21, 22, 23, 24}
	ev := statestore.Event{Kind: statestore.EventStored}
	for k, h := range local {
		ev.Blocks = append(ev.Blocks, statestore.StoredBlock{EngineHash: uint64(100 + k), LocalHash: h})
	}
	if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: pool, WorkerID: "w0", Events: []statestore.Event{ev}, NowMs: now}); err != nil {
		t.Fatal(err)
	}
	cfg, err := st.GetPool(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.Route(ctx, statestore.RouteRequest{Pool: pool, RequestID: "r" + strconv.FormatInt(now, 10),
		SeqHashes: blockhash.Sequence(nil, local), ISL: int64(4 * cfg.BlockSize), NowMs: now})
	if err != nil {
		t.Fatal(err)
	}
	if d.WorkerID != "w0" || d.OverlapBlocks != 4 {
		t.Fatalf("route after the layout fix: %+v, want w0 with 4 blocks", d)
	}
}

// TestRedisLayoutMismatchMigrate: a pool written by the layout-1 scripts answers layout_mismatch to every
// operation of this layout (never a silent miss); `pool migrate` brings it to layout 3 (layout 1's data is
// layout 2's; the load order lz is built from the roster and loads) and routing works.
func TestRedisLayoutMismatchMigrate(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	st := newRedisStorePrefix(t, "lm:", srv.Addr())
	cfg := statestore.DefaultPoolConfig(16)
	writeLayout1Pool(t, srv.Addr(), "lm:", "old", cfg)

	_, err := st.Route(ctx, statestore.RouteRequest{Pool: "old", RequestID: "r", ISL: 16, NowMs: 2})
	checkMismatch(t, "route", err)
	_, err = st.ApplyEvents(ctx, statestore.EventBatch{Pool: "old", WorkerID: "w0", NowMs: 2,
		Events: []statestore.Event{{Kind: statestore.EventStored, Blocks: []statestore.StoredBlock{{EngineHash: 1, LocalHash: 1}}}}})
	checkMismatch(t, "apply_events", err)
	checkMismatch(t, "put_worker", st.PutWorker(ctx, "old", statestore.WorkerSpec{WorkerID: "w1", URL: "http://w1"}, 2))
	checkMismatch(t, "put_pool", st.PutPool(ctx, "old", cfg))
	_, err = st.GetPool(ctx, "old")
	checkMismatch(t, "get_pool", err)
	_, err = st.Workers(ctx, "old", 2)
	checkMismatch(t, "workers", err)
	_, err = st.Done(ctx, "old", "r", 2)
	checkMismatch(t, "done", err)

	from, err := st.MigratePool(ctx, "old")
	if err != nil || from != "1" {
		t.Fatalf("migrate: from %q, %v", from, err)
	}
	if from, err := st.MigratePool(ctx, "old"); err != nil || from != "3" {
		t.Fatalf("migrate again: from %q, %v (want a no-op from 3)", from, err)
	}
	got, err := st.GetPool(ctx, "old")
	if err != nil || got.BlockSize != 16 || got.LeaseTTLMs != cfg.LeaseTTLMs {
		t.Fatalf("pool after migrate: %+v, %v", got, err)
	}
	ws, err := st.Workers(ctx, "old", 3)
	if err != nil || len(ws) != 1 || ws[0].WorkerID != "w0" {
		t.Fatalf("the layout-1 worker after migrate: %+v, %v", ws, err)
	}
	routeW0(t, st, "old", 4)

	if _, err := st.MigratePool(ctx, "nope"); !errors.Is(err, statestore.ErrUnknownPool) {
		t.Errorf("migrate of an unknown pool: %v", err)
	}
	if _, err := srv.Do(5*time.Second, "HSET", statestore.PoolKeys("lm:", "old")[0], "layout", "9"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MigratePool(ctx, "old"); !errors.Is(err, statestore.ErrConflict) || !strings.Contains(err.Error(), "pool recreate") {
		t.Errorf("migrate from an unknown layout: %v", err)
	}
}

// TestRedisLayoutRecreate: `pool recreate` drops every key of a layout-1 pool (index included) and
// declares it again with its knobs; workers re-register, events refill the index, routing works. Also on a
// 3-primary cluster (keys found by SCAN on every node).
func TestRedisLayoutRecreate(t *testing.T) {
	srv := sharedRedis(t)
	t.Run("standalone", func(t *testing.T) { recreateCase(t, srv.Addr()) })
	if testing.Short() {
		return
	}
	cl := testredis.StartCluster(t)
	t.Run("cluster", func(t *testing.T) { recreateCase(t, cl.Addrs()...) })
}

func recreateCase(t *testing.T, addrs ...string) {
	ctx := context.Background()
	prefix := "rc*[x]:" // glob characters in the prefix must be matched literally
	st := newRedisStorePrefix(t, prefix, addrs...)
	other := newRedisStorePrefix(t, "rc:", addrs...) // a neighbour namespace recreate must not touch
	cfg := statestore.DefaultPoolConfig(16)
	cfg.LeaseTTLMs = 12345
	for _, s := range []*statestore.Redis{st, other} {
		if err := s.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
		routeW0(t, s, "p", 1)
	}
	// Make st's pool a layout-1 pool as that version left it: same keys, no recorded version.
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Do(ctx, c.B().Hdel().Key(statestore.PoolKeys(prefix, "p")[0]).Field("layout").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err = st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "x", ISL: 16, NowMs: 2})
	checkMismatch(t, "route", err)

	from, err := st.RecreatePool(ctx, "p")
	if err != nil || from != "1" {
		t.Fatalf("recreate: from %q, %v", from, err)
	}
	got, err := st.GetPool(ctx, "p")
	if err != nil || got.LeaseTTLMs != 12345 {
		t.Fatalf("pool after recreate: %+v, %v", got, err)
	}
	ws, err := st.Workers(ctx, "p", 3)
	if err != nil || len(ws) != 0 {
		t.Fatalf("workers after recreate: %+v, %v (want none: they re-register)", ws, err)
	}
	if keys := poolKeysIn(t, c, prefix, "p"); len(keys) != 1 || keys[0] != statestore.PoolKeys(prefix, "p")[0] {
		t.Fatalf("keys after recreate: %q, want only the new cfg", keys)
	}
	if n := len(poolKeysIn(t, c, "rc:", "p")); n < 5 {
		t.Fatalf("neighbour namespace after recreate: %d keys", n)
	}
	routeW0(t, st, "p", 4)
	// The neighbour namespace still has its index and its lease.
	if sc, err := other.Overlap(ctx, "p", blockhash.Sequence(nil, []uint64{21, 22, 23, 24}), 5); err != nil || len(sc) != 1 {
		t.Fatalf("neighbour namespace after recreate: %+v, %v", sc, err)
	}
}

// poolKeysIn lists the keys of pool under prefix on every node (KEYS with the literal tag; test sizes).
func poolKeysIn(t *testing.T, c rueidis.Client, prefix, pool string) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, n := range c.Nodes() {
		ks, err := n.Do(context.Background(), n.B().Keys().Pattern("*").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range ks {
			if strings.HasPrefix(k, prefix+statestore.PoolTag(pool)+":") && !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

// TestRedisMigrateLayout2To3: a pool of layout 2 (layout 3's keys without the load order lz/lc and the
// last-seen order sz) with more ranks and workers than one migrate step takes (512) and loads on some
// ranks: `pool migrate` builds lz, lc and sz in several bounded steps, exactly as the layout-3 scripts
// maintain them, and routing then decides what the full scan decides.
func TestRedisMigrateLayout2To3(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	st := newRedisStorePrefix(t, "m23:", srv.Addr())
	cfg := statestore.DefaultPoolConfig(4)
	cfg.DecodeActiveRequestWeight = 0.3
	if err := st.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	for w := 0; w < 600; w++ { // 1,200 ranks and 600 workers (two steps each), some ids with a NUL byte
		id := "w" + strconv.Itoa(w)
		if w%50 == 7 {
			id = "w\x00" + strconv.Itoa(w)
		}
		if err := st.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: id, URL: "http://x", DPSize: 2}, int64(1+w%5)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 120; i++ {
		if _, err := st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "r" + strconv.Itoa(i), ISL: int64(4 * (i % 7)), NowMs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	keys := statestore.PoolKeys("m23:", "p")
	lz, lc, sz, lp := keys[21], keys[22], keys[23], keys[24]
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dump := func() string {
		z, err := c.Do(ctx, c.B().Zrange().Key(lz).Min("0").Max("-1").Withscores().Build()).ToAny()
		if err != nil {
			t.Fatal(err)
		}
		h, err := c.Do(ctx, c.B().Hgetall().Key(lc).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Do(ctx, c.B().Zrange().Key(sz).Min("0").Max("-1").Withscores().Build()).ToAny()
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.Do(ctx, c.B().Zrange().Key(lp).Min("0").Max("-1").Withscores().Build()).ToAny()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(z, h, s, p)
	}
	want := dump()
	if n, _ := srv.Do(5*time.Second, "ZCARD", lz); n != "1200" {
		t.Fatalf("lz holds %s members, want 1200", n)
	}
	for _, cmd := range [][]string{{"DEL", lz, lc, sz, lp}, {"HSET", keys[0], "layout", "2"}} {
		if _, err := srv.Do(5*time.Second, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	_, err = st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "x", ISL: 4, NowMs: 3})
	if !errors.Is(err, statestore.ErrLayoutMismatch) {
		t.Fatalf("route on a layout-2 pool: %v", err)
	}
	if from, err := st.MigratePool(ctx, "p"); err != nil || from != "2" {
		t.Fatalf("migrate: from %q, %v", from, err)
	}
	if got := dump(); got != want {
		t.Fatalf("lz/lc after migrate differ from the maintained ones:\n%q\nwant\n%q", got, want)
	}
	for i := 0; i < 20; i++ {
		req := statestore.RouteRequest{Pool: "p", RequestID: "y" + strconv.Itoa(i), ISL: int64(4 * (i % 5)), Random: float64(i) / 20, NowMs: 3}
		ex, err := st.Explain(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		d, err := st.Route(ctx, req)
		if err != nil || ex.Decision == nil || d != *ex.Decision {
			t.Fatalf("route after migrate: %+v, %v; the full scan %+v", d, err, ex.Decision)
		}
	}
}
