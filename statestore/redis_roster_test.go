package statestore_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestRedisRosterSpliceAndLeaseHint drives the two shortcuts of issue 15's Redis side against the memory
// store: registration splices a new worker's ranks into its roster chunk (roster_replace) instead of
// rebuilding it, and a lease's release finds its rank by the roster index recorded at booking
// (rid_locate). Worker ids are prefixes of each other ("w1", "w10", "w1a") and arrive out of order, so
// new ranks land before, between and after existing ones and shift the ranks that leases were booked
// on (their hints go stale and the release falls back to the roster search). Every decision and, after
// every release, every rank's loads must match the memory store's.
func TestRedisRosterSpliceAndLeaseHint(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	stores := []statestore.Store{statestore.NewMemory(), newRedisStore(t, srv.Addr())}
	cfg := statestore.DefaultPoolConfig(16)
	for _, s := range stores {
		if err := s.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(15, 4096))
	ids := []string{"w1", "w10", "w1a", "w2", "a", "w100", "z", "w0", "b7", "w11", "w1\x01", "m"}
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var now int64 = 1000
	var open []string
	nreq := 0
	route := func() {
		nreq++
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", nreq), ISL: int64(r.IntN(200)),
			Random: r.Float64(), NowMs: now}
		routeAlike(t, ctx, stores, req)
		open = append(open, req.RequestID)
	}
	compareWorkers := func(when string) {
		workersAlike(t, ctx, stores, now, when)
	}
	for k, id := range ids {
		spec := statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 1 + r.IntN(3),
			TotalKVBlocks: 1000, MaxNumBatchedTokens: 512}
		for _, s := range stores {
			if err := s.PutWorker(ctx, "p", spec, now); err != nil {
				t.Fatal(err)
			}
		}
		for j := 0; j < 3; j++ {
			route()
		}
		if k%3 == 2 { // release some leases booked before the last registrations moved their ranks
			for _, id := range open[:len(open)/2] {
				for _, s := range stores {
					if _, err := s.Done(ctx, "p", id, now); err != nil {
						t.Fatal(err)
					}
				}
			}
			open = open[len(open)/2:]
			compareWorkers(fmt.Sprintf("after registering %q", id))
		}
		if k == len(ids)/2 { // a removal rebuilds the roster (and drops removed workers' strings)
			for _, s := range stores {
				if err := s.RemoveWorker(ctx, "p", ids[0], now); err != nil {
					t.Fatal(err)
				}
			}
			compareWorkers("after removal")
		}
		now += 10
	}
	for _, id := range open {
		for _, s := range stores {
			if _, err := s.PrefillDone(ctx, "p", id, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	compareWorkers("after prefill_done")
	for _, id := range open {
		for _, s := range stores {
			if _, err := s.Done(ctx, "p", id, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	compareWorkers("after every release")
}

// TestRedisMemosAfterRecreate: the roster and loads memos live in the Functions library across calls,
// keyed by stamps in the pool's `sc` hash. `pool recreate` deletes that hash (its counters restart), so a
// recreated pool with the same workers must not meet the old pool's memos: its loads start at zero and
// its decisions match a fresh memory store's.
func TestRedisMemosAfterRecreate(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	rs := newRedisStore(t, srv.Addr())
	cfg := statestore.DefaultPoolConfig(16)
	setup := func(s statestore.Store) {
		if err := s.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"w1", "w2", "w3"} {
			if err := s.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 2}, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	setup(rs)
	for i := 0; i < 8; i++ { // leave loads booked: the memo holds non-zero loads
		if _, err := rs.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("old%d", i), ISL: 100, Random: 0.3, NowMs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rs.RecreatePool(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	mem := statestore.NewMemory()
	setup(mem)
	setup(rs)
	for i := 0; i < 8; i++ {
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("new%d", i), ISL: int64(16 * (i + 1)), Random: 0.7, NowMs: 3}
		a, err := mem.Route(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := rs.Route(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s after recreate: redis %+v, memory %+v", req.RequestID, b, a)
		}
	}
	wm, _ := mem.Workers(ctx, "p", 3)
	wr, err := rs.Workers(ctx, "p", 3)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(wm, wr) {
		t.Fatalf("workers after recreate:\nredis  %+v\nmemory %+v", wr, wm)
	}
}

// TestRedisLoadsStamp: the loads memo's stamp (sc field lvs, lib.lua lv_touch) is one counter. A pool's
// first loads write moves it to the server's TIME in µs (so a recreated pool, whose counter restarts,
// never takes a stamp an earlier memo holds), and each later writing call adds one. A value an earlier
// build wrote there (TIME ‖ counter, not an integer: a rolling upgrade) restarts it at TIME µs instead of
// failing the call.
func TestRedisLoadsStamp(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	rs := newRedisStorePrefix(t, "stamp:", srv.Addr())
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc := statestore.PoolKeys("stamp:", "p")[6]
	if err := rs.PutPool(ctx, "p", statestore.DefaultPoolConfig(16)); err != nil {
		t.Fatal(err)
	}
	if err := rs.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: "w1", URL: "http://w1"}, 1); err != nil {
		t.Fatal(err)
	}
	stamp := func() int64 {
		n, err := c.Do(ctx, c.B().Hget().Key(sc).Field("lvs").Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	route := func(id string) {
		if _, err := rs.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: id, ISL: 100, Random: 0.3, NowMs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	route("a")
	first := stamp()
	if first < 1e15 { // TIME in µs since 1970: > 1e15 after 2001
		t.Fatalf("after the first loads writes: lvs %d, want TIME µs", first)
	}
	if _, err := rs.Done(ctx, "p", "a", 3); err != nil {
		t.Fatal(err)
	}
	if n := stamp(); n != first+1 {
		t.Fatalf("after done: lvs %d, want %d", n, first+1)
	}
	if err := c.Do(ctx, c.B().Hset().Key(sc).FieldValue().FieldValue("lvs", "1764657600.123456.45").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	route("b")
	if n := stamp(); n <= first+1 {
		t.Fatalf("after an earlier build's stamp and a route: lvs %d, want a restart at TIME µs (> %d)", n, first+1)
	}
}

// TestRedisRosterChunks drives the chunked roster (layout 3: chunks of at most 64 candidates under a
// directory, roster_replace in lib.lua) through many splits and merges against the memory store: ~300
// workers of 1–4 ranks (and one of 150 ranks, more than a chunk) registered in random order (ids that are
// prefixes of each other, so new ranks land before, between and after existing ones, inside and at the
// edges of chunks), routes booked all along, leases released after the splits moved their ranks (stale
// roster-index hints), workers removed and registered again under the same id (new ranks, zero loads),
// and dp changes (a worker's run grows or shrinks in place, loads of surviving ranks carried). Every
// decision, and the whole worker list with loads at each checkpoint, must match the memory store's.
func TestRedisRosterChunks(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	stores := []statestore.Store{statestore.NewMemory(), newRedisStorePrefix(t, "chunks:", srv.Addr())}
	cfg := statestore.DefaultPoolConfig(16)
	for _, s := range stores {
		if err := s.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(3, 64))
	var ids []string
	for i := 0; i < 300; i++ {
		ids = append(ids, fmt.Sprintf("w%x", r.IntN(1<<uint(4+r.IntN(12)))))
	}
	ids = append(ids, "big", "w", "w0")
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	var now int64 = 1000
	var open []string
	nreq := 0
	dp := map[string]int{}
	put := func(id string, n int) {
		spec := statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: n, TotalKVBlocks: 1000, MaxNumBatchedTokens: 512}
		for _, s := range stores {
			if err := s.PutWorker(ctx, "p", spec, now); err != nil {
				t.Fatal(err)
			}
		}
		dp[id] = n
	}
	remove := func(id string) {
		for _, s := range stores {
			if err := s.RemoveWorker(ctx, "p", id, now); err != nil {
				t.Fatal(err)
			}
		}
		delete(dp, id)
	}
	route := func() {
		nreq++
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", nreq), ISL: int64(r.IntN(200)),
			Random: r.Float64(), NowMs: now}
		routeAlike(t, ctx, stores, req)
		open = append(open, req.RequestID)
	}
	release := func(k int) {
		for _, id := range open[:k] {
			for _, s := range stores {
				if r.IntN(4) == 0 {
					if _, err := s.PrefillDone(ctx, "p", id, now); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := s.Done(ctx, "p", id, now); err != nil {
					t.Fatal(err)
				}
			}
		}
		open = open[k:]
	}
	compareWorkers := func(when string) {
		t.Helper()
		workersAlike(t, ctx, stores, now, when)
		ranks := 0
		for _, n := range dp {
			ranks += n
		}
		checkChunks(t, srv.Addr(), "chunks:", "p", ranks, when)
	}
	for k, id := range ids {
		n := 1 + r.IntN(4)
		if id == "big" {
			n = 150
		}
		put(id, n)
		if k%4 == 0 {
			route()
		}
		if k%40 == 39 { // release the older half: their ranks moved (and their chunks split) since booking
			release(len(open) / 2)
			compareWorkers(fmt.Sprintf("after %d registrations", k+1))
		}
		now += 10
	}
	for j := 0; j < 40; j++ {
		route()
	}
	// Churn: removals, re-registrations under the same id, dp changes (grow and shrink), with bookings.
	for j := 0; j < 240; j++ {
		var live []string
		for id := range dp {
			live = append(live, id)
		}
		sort.Strings(live)
		id := live[r.IntN(len(live))]
		switch r.IntN(3) {
		case 0:
			remove(id)
			if r.IntN(2) == 0 {
				put(id, 1+r.IntN(4))
			}
		case 1:
			put(id, 1+r.IntN(6)) // a spec change when dp differs, a heartbeat otherwise
		default:
			put(fmt.Sprintf("n%d", j), 1+r.IntN(3))
		}
		if j%3 == 0 {
			route()
		}
		if j%30 == 29 {
			release(len(open) / 3)
			compareWorkers(fmt.Sprintf("after %d churn steps", j+1))
		}
		now += 10
	}
	release(len(open))
	compareWorkers("after every release")
	if n := checkChunks(t, srv.Addr(), "chunks:", "p", 0, ""); n < 10 {
		t.Fatalf("%d chunks: the test should split the roster into many", n)
	}
	for id := range dp { // empty the pool, then fill it again: the roster starts from no chunks
		remove(id)
	}
	compareWorkers("empty")
	for j := 0; j < 100; j++ { // descending ids: a new first worker before a full first chunk
		put(fmt.Sprintf("again%03d", 99-j), 1+j%3)
	}
	for j := 0; j < 20; j++ {
		route()
	}
	compareWorkers("refilled")
	for j := 0; j < 150; j++ { // ascending ids after every other: a full last chunk gets a new one after it
		put(fmt.Sprintf("zz%03d", j), 1)
		if j%10 == 0 {
			route()
		}
	}
	release(len(open) / 2)
	compareWorkers("appended")
}

// checkChunks checks a layout-3 roster's keys (lib.lua "Chunked roster"): the directory `ro` lists chunks
// of 1–64 candidates whose counts add up to ranks (unless 0 is given), and exactly those chunks have
// `ro:<cid>` and `lv:<cid>` keys (24 bytes of loads per candidate): copy-on-write leaves no garbage. It
// returns the number of chunks.
// routeAlike routes req on every store (the memory store first) and fails unless all decide the same.
func routeAlike(t *testing.T, ctx context.Context, stores []statestore.Store, req statestore.RouteRequest) {
	t.Helper()
	var first statestore.Decision
	for i, s := range stores {
		d, err := s.Route(ctx, req)
		if err != nil {
			t.Fatalf("%s route: %v", req.RequestID, err)
		}
		if i == 0 {
			first = d
		} else if !reflect.DeepEqual(d, first) {
			t.Fatalf("%s: redis decided %+v, memory %+v", req.RequestID, d, first)
		}
	}
}

// workersAlike fails unless every store lists pool "p"'s workers (loads included) the same at now.
func workersAlike(t *testing.T, ctx context.Context, stores []statestore.Store, now int64, when string) {
	t.Helper()
	var first []statestore.WorkerInfo
	for i, s := range stores {
		ws, err := s.Workers(ctx, "p", now)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = ws
		} else if !reflect.DeepEqual(ws, first) {
			t.Fatalf("%s: workers differ:\nredis  %+v\nmemory %+v", when, ws, first)
		}
	}
}

func checkChunks(t *testing.T, addr, prefix, pool string, ranks int, when string) int {
	t.Helper()
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := statestore.PoolKeys(prefix, pool)
	ro, lv := keys[1], keys[4]
	dir, err := c.Do(ctx, c.B().Get().Key(ro).Build()).AsBytes()
	if rueidis.IsRedisNil(err) {
		dir, err = nil, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	total := 0
	if len(dir) > 0 {
		off := 1 + int(dir[0])
		for off < len(dir) {
			cid, n, wl := binary.BigEndian.Uint32(dir[off:]), int(binary.BigEndian.Uint32(dir[off+4:])), int(binary.BigEndian.Uint16(dir[off+8:]))
			off += 10 + wl
			if n < 1 || n > 64 {
				t.Fatalf("%s: chunk %d holds %d candidates", when, cid, n)
			}
			want[strconv.FormatUint(uint64(cid), 10)] = n
			total += n
		}
	}
	if ranks > 0 && total != ranks {
		t.Fatalf("%s: the directory counts %d candidates, the pool has %d ranks", when, total, ranks)
	}
	for _, k := range []string{ro, lv} {
		got, err := c.Do(ctx, c.B().Keys().Pattern(k+":*").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d keys %s:*, the directory lists %d chunks", when, len(got), k, len(want))
		}
		for _, key := range got {
			n, ok := want[strings.TrimPrefix(key, k+":")]
			if !ok {
				t.Fatalf("%s: %s is no chunk of the directory", when, key)
			}
			if k == lv {
				if l, err := c.Do(ctx, c.B().Strlen().Key(key).Build()).AsInt64(); err != nil || l != int64(24*n) {
					t.Fatalf("%s: %s holds %d bytes, want %d (%v)", when, key, l, 24*n, err)
				}
			}
		}
	}
	return len(want)
}

// TestRedisLoadsMemoWithinCall: a call may take the loads stamp (lv_touch: releasing an expired lease)
// while no memo exists (a registration just dropped it), then build the loads memo (a full scan at
// temperature > 0, an explain, or the fast path's partial memo) and then book. The booking must reach
// that memo: a memo made after the call's stamp and not updated by its own booking would serve the next
// call the loads before the booking. Each step's decision and explanation (which shows every candidate's
// loads) must match the memory store's. With 130 workers (260 ranks) the fast path's partial memo is
// the paged one (lib.lua lv_partial: more than LV_PAGE candidates), read through route's view.
func TestRedisLoadsMemoWithinCall(t *testing.T) {
	srv := sharedRedis(t)
	for _, workers := range []int{3, 130} {
		for _, temp := range []float64{0, 0.5} {
			t.Run(fmt.Sprintf("workers=%d/temperature=%g", workers, temp), func(t *testing.T) {
				loadsMemoWithinCall(t, srv.Addr(), workers, temp)
			})
		}
	}
}

func loadsMemoWithinCall(t *testing.T, addr string, workers int, temp float64) {
	ctx := context.Background()
	stores := []statestore.Store{statestore.NewMemory(), newRedisStorePrefix(t, fmt.Sprintf("lvmemo%d-%g:", workers, temp), addr)}
	cfg := statestore.DefaultPoolConfig(16)
	cfg.Temperature = temp
	cfg.LeaseTTLMs = 100
	for _, s := range stores {
		if err := s.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
		for w := 1; w <= workers; w++ {
			id := fmt.Sprintf("w%d", w)
			if err := s.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 2}, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	now := int64(10)
	for step := 0; step < 40; step++ {
		if step%5 == 4 {
			// A registration drops the memo (roster change); then every lease booked so far
			// expires, so the next route takes its stamp releasing them before any memo exists.
			for _, s := range stores {
				spec := statestore.WorkerSpec{WorkerID: fmt.Sprintf("n%d", step), URL: "http://n", DPSize: 1}
				if err := s.PutWorker(ctx, "p", spec, now); err != nil {
					t.Fatal(err)
				}
			}
			now += 150
		}
		now++
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", step), ISL: int64(16 * (1 + step%7)),
			Random: float64(step%10) / 10, NowMs: now}
		var dec, exp [2]any
		for k, s := range stores {
			d, err := s.Route(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			dec[k] = d
			q := req
			q.RequestID = "x" + req.RequestID
			e, err := s.Explain(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			e.Pages, e.Snapshot = 0, nil // Redis pages an explain of over ExplainPageCandidates ranks and says so
			exp[k] = e
		}
		if !reflect.DeepEqual(dec[0], dec[1]) {
			t.Fatalf("step %d route: memory %+v, redis %+v", step, dec[0], dec[1])
		}
		if !reflect.DeepEqual(exp[0], exp[1]) {
			t.Fatalf("step %d explain:\nmemory %+v\nredis  %+v", step, exp[0], exp[1])
		}
	}
}
