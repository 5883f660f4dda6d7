package statestore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/luascripts"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestPoolTag: a plain pool name stands in its tag as it is (marked '='); any other is marked '%' and
// hex-encoded; no tag holds a brace but its own two, so every pool is one cluster slot; and distinct names
// (random bytes, near-misses of the markers, layouts 1–5's hex tags) never share a tag.
func TestPoolTag(t *testing.T) {
	for pool, want := range map[string]string{
		"llama-3.1-70b":               "{=llama-3.1-70b}",
		"meta-llama/Llama-3.1-8B":     "{=meta-llama/Llama-3.1-8B}",
		"%6162":                       "{=%6162}",
		"=x":                          "{==x}",
		"a}{b":                        "{%617d7b62}",
		"two words":                   "{%74776f20776f726473}",
		"é":                           "{%c3a9}",
		"":                            "{%}",
		strings.Repeat("x", 3) + "\n": "{%7878780a}",
	} {
		if got := statestore.PoolTag(pool); got != want {
			t.Errorf("PoolTag(%q) = %q, want %q", pool, got, want)
		}
	}
	seen := map[string]string{}
	add := func(pool, tag string) {
		if prev, ok := seen[tag]; ok && prev != pool {
			t.Fatalf("pools %q and %q share the tag %q", prev, pool, tag)
		}
		seen[tag] = pool
	}
	rng := rand.New(rand.NewPCG(6, 6))
	alphabet := []byte("ab=%{}0123456789 \xc3\xa9\x00~")
	for i := 0; i < 20000; i++ {
		b := make([]byte, rng.IntN(8))
		for j := range b {
			b[j] = alphabet[rng.IntN(len(alphabet))]
		}
		pool := string(b)
		tag := statestore.PoolTag(pool)
		if !strings.HasPrefix(tag, "{") || !strings.HasSuffix(tag, "}") || strings.ContainsAny(tag[1:len(tag)-1], "{}") || len(tag) < 3 {
			t.Fatalf("PoolTag(%q) = %q: not one non-empty hash tag", pool, tag)
		}
		add(pool, tag)
		add("legacy:"+pool, statestore.LegacyPoolTag(pool)) // layouts 1–5's tags never meet layout 6's
	}
}

// toLegacyTag moves every key of pool from this layout's tag to layouts 1–5's (RENAME: standalone only),
// replacing the tombstone PutPool left there, and records layout in its cfg ("" = none: layout 1): the pool
// as a router of that layout left it (layout 5's keys hold what layout 6's do; only the names changed).
func toLegacyTag(t *testing.T, c rueidis.Client, prefix, pool, layout string) {
	t.Helper()
	ctx := context.Background()
	src, dst := prefix+statestore.PoolTag(pool)+":", prefix+statestore.LegacyPoolTag(pool)+":"
	keys := poolKeysIn(t, c, prefix, pool)
	if len(keys) == 0 {
		t.Fatalf("pool %q has no keys", pool)
	}
	for _, k := range keys {
		if err := c.Do(ctx, c.B().Rename().Key(k).Newkey(dst+strings.TrimPrefix(k, src)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	cmd := c.B().Hdel().Key(dst + "cfg").Field("moved").Build()
	if layout != "" {
		if err := c.Do(ctx, c.B().Hset().Key(dst+"cfg").FieldValue().FieldValue("layout", layout).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(ctx, cmd).Error(); err != nil {
		t.Fatal(err)
	}
}

// legacyKeys lists the keys under pool's layouts 1–5 tag.
func legacyKeys(t *testing.T, c rueidis.Client, prefix, pool string) []string {
	t.Helper()
	ks, err := c.Do(context.Background(), c.B().Keys().Pattern("*").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range ks {
		if strings.HasPrefix(k, prefix+statestore.LegacyPoolTag(pool)+":") {
			out = append(out, k)
		}
	}
	return out
}

// checkTombstone asserts pool's legacy cfg key holds only the tombstone: layout 6 (so a router of layouts
// 2–5 answers layout_mismatch: its cfg check compares the field with its own version) and the new tag.
func checkTombstone(t *testing.T, c rueidis.Client, prefix, pool string) {
	t.Helper()
	m, err := c.Do(context.Background(), c.B().Hgetall().Key(prefix+statestore.LegacyPoolTag(pool)+":cfg").Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"layout": strconv.Itoa(luascripts.Layout), "moved": statestore.PoolTag(pool)}
	if len(m) != len(want) || m["layout"] != want["layout"] || m["moved"] != want["moved"] {
		t.Fatalf("tombstone of %q: %v, want %v", pool, m, want)
	}
	if ks := legacyKeys(t, c, prefix, pool); len(ks) != 1 {
		t.Fatalf("keys left under the old tag of %q: %v", pool, ks)
	}
}

// TestRedisLayout6Move: a pool layouts 1–5 left under their hash tag (hex of the name) is never a silent
// miss for layout 6, which looks under its own tag: every operation answers layout_mismatch naming the
// pool's layout, and PutPool (a router declaring its pools at start) refuses instead of creating a second,
// empty pool. `pool migrate` moves the keys (index, roster, loads, leases) and routing picks what it
// picked before; a tombstone stays under the old tag. `pool recreate` of such a pool works too, and a
// layout-1 pool under the old tag is moved and converted.
func TestRedisLayout6Move(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	const prefix = "l6:"
	st := newRedisStorePrefix(t, prefix, srv.Addr())
	c := rawClient(t, srv.Addr())
	cfg := statestore.DefaultPoolConfig(16)
	cfg.LeaseTTLMs = 54321
	pool := "org/model-8B" // plain: its layout-6 tag differs from its hex one
	if err := st.PutPool(ctx, pool, cfg); err != nil {
		t.Fatal(err)
	}
	checkTombstone(t, c, prefix, pool) // a new pool leaves one too
	routeW0(t, st, pool, 1)            // w0 holds 21..24 and a lease
	local := []uint64{21, 22, 23, 24}
	req := statestore.RouteRequest{Pool: pool, RequestID: "q", SeqHashes: blockhash.Sequence(nil, local), ISL: 64, NowMs: 2}
	before, err := st.Explain(ctx, req)
	if err != nil {
		t.Fatal(err)
	}

	toLegacyTag(t, c, prefix, pool, "5")
	_, err = st.Route(ctx, req)
	checkLegacyMismatch(t, "route", "5", err)
	_, err = st.GetPool(ctx, pool)
	checkLegacyMismatch(t, "get_pool", "5", err)
	checkLegacyMismatch(t, "put_pool", "5", st.PutPool(ctx, pool, cfg))
	checkLegacyMismatch(t, "put_worker", "5", st.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: "w9", URL: "http://w9"}, 2))
	_, err = st.Done(ctx, pool, "r1", 2)
	checkLegacyMismatch(t, "done", "5", err)
	if ks := poolKeysIn(t, c, prefix, pool); len(ks) != 0 {
		t.Fatalf("layout 6 wrote under its tag for a pool it does not have: %v", ks)
	}

	from, err := st.MigratePool(ctx, pool)
	if err != nil || from != "5" {
		t.Fatalf("migrate: from %q, %v", from, err)
	}
	checkTombstone(t, c, prefix, pool)
	if from, err := st.MigratePool(ctx, pool); err != nil || from != strconv.Itoa(luascripts.Layout) {
		t.Fatalf("migrate again: from %q, %v", from, err)
	}
	got, err := st.GetPool(ctx, pool)
	if err != nil || got.LeaseTTLMs != 54321 {
		t.Fatalf("pool after migrate: %+v, %v", got, err)
	}
	after, err := st.Explain(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("explain after the move:\n%+v\nbefore:\n%+v", after, before)
	}
	if _, err := st.Done(ctx, pool, "r1", 3); err != nil { // routeW0's lease moved with the pool
		t.Fatalf("done of a lease booked before the move: %v", err)
	}
	routeW0(t, st, pool, 4)

	// Both tags hold the pool (a half-done move re-run after routers started): refused, recreate named.
	toLegacyTag(t, c, prefix, pool, "5")
	if err := c.Do(ctx, c.B().Copy().Source(prefix+statestore.LegacyPoolTag(pool)+":cfg").Destination(statestore.PoolKeys(prefix, pool)[0]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.MigratePool(ctx, pool); !errors.Is(err, statestore.ErrConflict) || !strings.Contains(err.Error(), "pool recreate") {
		t.Fatalf("migrate with the pool under both tags: %v", err)
	}
	// Recreate takes either: knobs kept, both tags' keys dropped, the tombstone left.
	if err := c.Do(ctx, c.B().Del().Key(statestore.PoolKeys(prefix, pool)[0]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if from, err := st.RecreatePool(ctx, pool); err != nil || from != "5" {
		t.Fatalf("recreate: from %q, %v", from, err)
	}
	checkTombstone(t, c, prefix, pool)
	if got, err := st.GetPool(ctx, pool); err != nil || got.LeaseTTLMs != 54321 {
		t.Fatalf("pool after recreate: %+v, %v", got, err)
	}
	routeW0(t, st, pool, 5)

	// A layout-1 pool under the old tag (a name needing the hex form under layout 6 too).
	old := "old pool"
	writeLayout1Pool(t, srv.Addr(), prefix, old, cfg)
	toLegacyTag(t, c, prefix, old, "")
	_, err = st.GetPool(ctx, old)
	checkLegacyMismatch(t, "get_pool", "1", err)
	if from, err := st.MigratePool(ctx, old); err != nil || from != "1" {
		t.Fatalf("migrate of a layout-1 pool: from %q, %v", from, err)
	}
	checkTombstone(t, c, prefix, old)
	routeW0(t, st, old, 6)

	if _, err := st.MigratePool(ctx, "nope"); !errors.Is(err, statestore.ErrUnknownPool) {
		t.Errorf("migrate of an unknown pool: %v", err)
	}
	if _, err := st.Route(ctx, statestore.RouteRequest{Pool: "nope", RequestID: "x", ISL: 16, NowMs: 7}); !errors.Is(err, statestore.ErrUnknownPool) {
		t.Errorf("route to an unknown pool: %v", err)
	}
}

// checkLegacyMismatch asserts err is the typed layout_mismatch naming the layout found and this one.
func checkLegacyMismatch(t *testing.T, op, found string, err error) {
	t.Helper()
	var lm *statestore.LayoutMismatchError
	if !errors.As(err, &lm) || lm.Found != found || lm.Want != strconv.Itoa(luascripts.Layout) {
		t.Fatalf("%s on a pool under layouts 1–5's tag: %v, want layout_mismatch found %s", op, err, found)
	}
	if !strings.Contains(err.Error(), "pool migrate") {
		t.Errorf("%s: %q does not name pool migrate", op, err)
	}
}

// TestRedisLayout6MoveCluster: the move crosses slots (the two tags hash apart), so it runs DUMP/RESTORE
// through the cluster client; on a 3-primary cluster the migrated pool routes as before.
func TestRedisLayout6MoveCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster: the container tier")
	}
	cl := testredis.StartCluster(t)
	ctx := context.Background()
	const prefix = "l6c:"
	st := newRedisStorePrefix(t, prefix, cl.Addrs()...)
	c := rawClient(t, cl.Addrs()...)
	pool := "p"
	if err := st.PutPool(ctx, pool, statestore.DefaultPoolConfig(16)); err != nil {
		t.Fatal(err)
	}
	routeW0(t, st, pool, 1)
	// Under the old tag: DUMP/RESTORE (RENAME cannot cross slots), then layout 5 recorded.
	src, dst := prefix+statestore.PoolTag(pool)+":", prefix+statestore.LegacyPoolTag(pool)+":"
	for _, k := range poolKeysIn(t, c, prefix, pool) {
		blob, err := c.Do(ctx, c.B().Dump().Key(k).Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		nk := dst + strings.TrimPrefix(k, src)
		if err := c.Do(ctx, c.B().Restore().Key(nk).Ttl(0).SerializedValue(blob).Replace().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(ctx, c.B().Hset().Key(dst+"cfg").FieldValue().FieldValue("layout", "5").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Hdel().Key(dst+"cfg").Field("moved").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err := st.GetPool(ctx, pool)
	checkLegacyMismatch(t, "get_pool", "5", err)
	if from, err := st.MigratePool(ctx, pool); err != nil || from != "5" {
		t.Fatalf("migrate on a cluster: from %q, %v", from, err)
	}
	routeW0(t, st, pool, 2)
}

// TestRedisPoollessLeaseSkipsFailingPool: a done without a pool asks every pool of the registry; one that
// fails (here a pool layouts 1–5 left, answering layout_mismatch; in production a pool whose primary is
// failing over, TestChaosClusterFailover) does not fail the release of a lease another pool holds, whatever
// the pools' order. An id no healthy pool holds still reports the failure (it may be in that pool).
func TestRedisPoollessLeaseSkipsFailingPool(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	const prefix = "pl:"
	st := newRedisStorePrefix(t, prefix, srv.Addr())
	c := rawClient(t, srv.Addr())
	for _, p := range []string{"b", "z"} {
		if err := st.PutPool(ctx, p, statestore.DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
	}
	routeW0(t, st, "z", 1)              // books lease r1 in z, the last pool in name order
	toLegacyTag(t, c, prefix, "b", "5") // b, asked first, still in the registry, now failing
	if ok, err := st.Done(ctx, "", "r1", 2); err != nil || !ok {
		t.Fatalf("pool-less done with a failing pool beside: %v, %v", ok, err)
	}
	var lm *statestore.LayoutMismatchError
	if ok, err := st.Done(ctx, "", "never-booked", 3); ok || !errors.As(err, &lm) {
		t.Fatalf("pool-less done of an id no healthy pool holds: %v, %v (want the failing pool's error)", ok, err)
	}
}

// rawClient is a plain client of the test's server(s), closed with the test.
func rawClient(t *testing.T, addrs ...string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
