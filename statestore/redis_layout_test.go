package statestore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/luascripts"
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
	for _, want := range []string{"key layout 1", "layout " + strconv.Itoa(luascripts.Layout), "pool migrate", "pool recreate"} {
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
// operation of this layout (never a silent miss); `pool migrate` brings it to this layout (3: through
// layout 2's data, converting the roster into chunks) and routing works.
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
	if from, err := st.MigratePool(ctx, "old"); err != nil || from != strconv.Itoa(luascripts.Layout) {
		t.Fatalf("migrate again: from %q, %v (want a no-op from %d)", from, err, luascripts.Layout)
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
	// The new pool's cfg and sc (its event index's bucket count, written by put_pool), nothing else.
	pk := statestore.PoolKeys(prefix, "p")
	if keys := poolKeysIn(t, c, prefix, "p"); !slices.Equal(sorted(keys), sorted([]string{pk[0], pk[6]})) {
		t.Fatalf("keys after recreate: %q, want only the new cfg and sc", keys)
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

// layout2Script returns one operation of the layout-2 fixture (testdata/layout2) as an EVAL script.
func layout2Script(t *testing.T, name string) *rueidis.Lua {
	t.Helper()
	var src strings.Builder
	for _, f := range []string{"knobs_gen", "lib"} {
		b, err := os.ReadFile("testdata/layout2/" + f + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		src.Write(b)
		src.WriteString("\n")
	}
	body, err := os.ReadFile("testdata/layout2/" + name + ".lua")
	if err != nil {
		t.Fatal(err)
	}
	src.WriteString("local function kvr_op(KEYS, ARGV)\n" + string(body) + "\nend\nreturn kvr_op(KEYS, ARGV)\n")
	return rueidis.NewLuaScript(src.String())
}

// TestRedisLayout2Migrate: a pool written by layout 2's scripts (testdata/layout2: one packed roster
// string, one loads string) with ~400 ranks, bookings and some releases — the same operations applied to
// a memory store — answers layout_mismatch to this layout, and `pool migrate` converts it in bounded
// steps (one 64-candidate chunk per call) into the chunked roster of layout 3: every rank's loads carried,
// the leases booked under layout 2 released correctly afterwards (their roster-index hints still point
// at their ranks: the order is unchanged), and decisions, registrations and removals keep matching the
// memory store.
func TestRedisLayout2Migrate(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	st := newRedisStorePrefix(t, "l2:", srv.Addr())
	mem := statestore.NewMemory()
	cfg := statestore.DefaultPoolConfig(16)
	for _, s := range []statestore.Store{st, mem} {
		if err := s.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := statestore.PoolKeys("l2:", "p")
	// cfg is the same in layouts 2 and 3 (the knobs, the packed 'bin'): only the recorded version differs.
	if err := c.Do(ctx, c.B().Hset().Key(keys[0]).FieldValue().FieldValue("layout", "2").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	putWorker, route, lease := layout2Script(t, "put_worker"), layout2Script(t, "route"), layout2Script(t, "lease")
	knobs, err := os.ReadFile("testdata/layout2/knobs_gen.lua")
	if err != nil {
		t.Fatal(err)
	}
	overrides := strings.Count(regexp.MustCompile(`CFG_OVERRIDES = \{[^}]*\}`).FindString(string(knobs)), "'") / 2
	r := rand.New(rand.NewPCG(2, 3))
	var now int64 = 1000
	var ids []string
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("w%x", r.IntN(1<<uint(4+r.IntN(12))))
		spec := statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 1 + r.IntN(3), TotalKVBlocks: 1000, MaxNumBatchedTokens: 512}
		if err := mem.PutWorker(ctx, "p", spec, now); err != nil {
			t.Fatal(err)
		}
		args := []string{strconv.FormatInt(now, 10), id, spec.URL, strconv.Itoa(spec.DPSize), "1000", "512", "-1", "4096"}
		if err := putWorker.Exec(ctx, c, keys, args).Error(); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var open []string
	for i := 0; i < 150; i++ {
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", i), ISL: int64(r.IntN(200)), Random: r.Float64(), NowMs: now}
		d, err := mem.Route(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"route", strconv.FormatInt(now, 10), req.RequestID, "", strconv.FormatInt(req.ISL, 10), "", "",
			strconv.FormatFloat(req.Random, 'g', -1, 64)}
		for j := 0; j < overrides; j++ {
			args = append(args, "")
		}
		args = append(args, "0", "0")
		arr, err := route.Exec(ctx, c, keys, args).ToArray()
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := arr[1].ToString(); got != d.WorkerID { // {'ok', wid, ...}
			t.Fatalf("%s: layout 2 chose %q, memory %q", req.RequestID, got, d.WorkerID)
		}
		open = append(open, req.RequestID)
		if i%3 == 2 { // release some under layout 2
			id := open[0]
			open = open[1:]
			if _, err := mem.Done(ctx, "p", id, now); err != nil {
				t.Fatal(err)
			}
			if err := lease.Exec(ctx, c, keys, []string{"done", strconv.FormatInt(now, 10), id}).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err = st.Workers(ctx, "p", now)
	var lm *statestore.LayoutMismatchError
	if !errors.As(err, &lm) {
		t.Fatalf("workers on a layout-2 pool: %v, want layout_mismatch", err)
	}

	from, err := st.MigratePool(ctx, "p")
	if err != nil || from != "2" {
		t.Fatalf("migrate: from %q, %v", from, err)
	}
	if from, err := st.MigratePool(ctx, "p"); err != nil || from != strconv.Itoa(luascripts.Layout) {
		t.Fatalf("migrate again: from %q, %v", from, err)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(keys[4], keys[1]+":m").Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("layout 2's loads string or the temporary directory left after migrate: %d, %v", n, err)
	}
	compare := func(when string) {
		t.Helper()
		a, err := mem.Workers(ctx, "p", now)
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Workers(ctx, "p", now)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: workers differ:\nredis  %+v\nmemory %+v", when, b, a)
		}
	}
	compare("after migrate")
	if n := checkChunks(t, srv.Addr(), "l2:", "p", 0, "after migrate"); n < 5 {
		t.Fatalf("%d chunks after migrate", n)
	}
	both := func(f func(s statestore.Store) error) {
		t.Helper()
		for _, s := range []statestore.Store{mem, st} {
			if err := f(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, id := range open[:len(open)/2] { // layout-2 leases released by layout 3
		both(func(s statestore.Store) error { _, err := s.Done(ctx, "p", id, now); return err })
	}
	open = open[len(open)/2:]
	compare("after releasing layout-2 leases")
	for i := 0; i < 40; i++ {
		now += 10
		id := ids[r.IntN(len(ids))]
		if i%2 == 0 {
			both(func(s statestore.Store) error { return s.RemoveWorker(ctx, "p", id, now) })
			both(func(s statestore.Store) error {
				return s.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 2}, now)
			})
		} else {
			both(func(s statestore.Store) error {
				return s.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: fmt.Sprintf("m%d", i), URL: "http://m"}, now)
			})
		}
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("n%d", i), ISL: int64(r.IntN(200)), Random: r.Float64(), NowMs: now}
		a, err := mem.Route(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := st.Route(ctx, req)
		if err != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s after migrate: redis %+v (%v), memory %+v", req.RequestID, b, err, a)
		}
	}
	for _, id := range open {
		both(func(s statestore.Store) error { _, err := s.Done(ctx, "p", id, now); return err })
	}
	compare("after every release")
}

// TestRedisMigrateLayout2To3: a pool past migrate's roster step (layout 3's chunked roster without the load
// order lz/lp and the last-seen order sz) with more ranks and workers than one migrate step takes (512)
// and loads on some ranks: `pool migrate` builds lz, lp and sz in several bounded steps, exactly as the
// scripts maintain them (and no lc, since layout 5), and routing then decides what the full scan decides.
// (TestRedisLayout2Migrate covers the whole way from layout 2's scripts.)
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
	// The orders gone and the pool left where migrate's roster step (layout 2's one-string roster into
	// chunks) hands over to the order builders: marked migrating from layout 2, at step 2.
	for _, cmd := range [][]string{{"DEL", lz, lc, sz, lp}, {"HSET", keys[0], "layout", "2>3", "mfrom", "2", "mstep", "2"}} {
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
		t.Fatalf("lz/lc/sz/lp after migrate differ from the maintained ones:\n%q\nwant\n%q", got, want)
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

// sorted returns a sorted copy of ss.
func sorted(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return out
}
