package statestore

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
)

// rescoreFixture is one pool on a Redis store and the same pool on a memory store, with a few hundred
// workers and their loads, kept in step by the same calls.
type rescoreFixture struct {
	t    *testing.T
	ctx  context.Context
	rs   *Redis
	mem  *Memory
	r    *rand.Rand
	ids  []string // registered workers
	open []string // requests with a lease
	next int      // the next worker id / request id number
	now  int64
	// pending: the knobs of the Redis store's rescoring under way, applied to the memory store after
	// the Redis call that switched (a step, or a writing call's tick).
	pending *PoolConfig
	routes  int // routes compared
}

func newRescoreFixture(t *testing.T, prefix string, workers int, cfg PoolConfig) *rescoreFixture {
	rs, _ := newInternalRedis(t, prefix)
	f := &rescoreFixture{t: t, ctx: context.Background(), rs: rs, mem: NewMemory(), r: rand.New(rand.NewPCG(15, 27)), now: 1}
	f.both("put_pool", func(s Store) error { return s.PutPool(f.ctx, "p", cfg) })
	for len(f.ids) < workers {
		f.register()
	}
	for i := 0; i < workers; i++ { // loads from a few values
		f.route()
	}
	return f
}

// follow applies the pending knobs to the memory store once the Redis store switched to them, and reports
// whether it did.
func (f *rescoreFixture) follow() bool {
	f.t.Helper()
	if f.pending == nil {
		return false
	}
	if pend, _ := f.rescoring(); pend {
		return false
	}
	if err := f.mem.PutPool(f.ctx, "p", *f.pending); err != nil {
		f.t.Fatal(err)
	}
	f.pending = nil
	return true
}

// start starts a rescoring to cfg on the Redis store (put_pool alone, no step driven); it returns the
// generation.
func (f *rescoreFixture) start(cfg PoolConfig) int64 {
	f.t.Helper()
	gen, err := f.rs.putPool(f.ctx, "p", cfg)
	if err != nil || gen == 0 {
		f.t.Fatalf("put_pool: generation %d (%v), want a rescoring", gen, err)
	}
	f.pending = &cfg
	return gen
}

// both runs op on the memory store and on the Redis store.
func (f *rescoreFixture) both(what string, op func(s Store) error) {
	f.t.Helper()
	for _, s := range []Store{f.mem, f.rs} {
		if err := op(s); err != nil {
			f.t.Fatalf("%s on %s: %v", what, s.Name(), err)
		}
	}
	f.follow()
}

func (f *rescoreFixture) register() {
	id := fmt.Sprintf("w%04d", f.next)
	f.next++
	spec := WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 1 + f.r.IntN(2), MaxNumBatchedTokens: []int64{0, 64}[f.r.IntN(2)]}
	f.both("put_worker", func(s Store) error { return s.PutWorker(f.ctx, "p", spec, f.now) })
	f.ids = append(f.ids, id)
}

func (f *rescoreFixture) remove() {
	j := f.r.IntN(len(f.ids))
	id := f.ids[j]
	f.ids = slices.Delete(f.ids, j, j+1)
	f.both("remove_worker", func(s Store) error { return s.RemoveWorker(f.ctx, "p", id, f.now) })
}

// heartbeat refreshes a worker with its spec unchanged (put_worker's O(1) path, which takes a tick).
func (f *rescoreFixture) heartbeat() {
	f.both("heartbeat", func(s Store) error {
		ws, err := s.Workers(f.ctx, "p", f.now)
		if err != nil || len(ws) == 0 {
			return err
		}
		w := ws[f.r.IntN(len(ws))]
		return s.PutWorker(f.ctx, "p", WorkerSpec{WorkerID: w.WorkerID, URL: w.URL, DPSize: len(w.Ranks), TotalKVBlocks: w.TotalKVBlocks,
			MaxNumBatchedTokens: w.MaxNumBatchedTokens, KVEvents: w.KVEvents}, f.now)
	})
}

// rescoreChain is the prompt chain workers hold prefixes of (block size 4).
var rescoreChain = blockhash.Sequence(nil, []uint64{1, 2, 3, 4, 5, 6})

// event stores a prefix of rescoreChain on a random worker's rank 0 (apply_events, which takes a tick).
func (f *rescoreFixture) event() {
	ev := Event{Kind: EventStored, Tier: Tier(f.r.IntN(3))}
	for j := 0; j < 1+f.r.IntN(len(rescoreChain)); j++ {
		ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: rescoreChain[j] + uint64(f.next)<<40, LocalHash: uint64(j + 1)})
	}
	f.next++
	b := EventBatch{Pool: "p", WorkerID: f.ids[f.r.IntN(len(f.ids))], Events: []Event{ev}, NowMs: f.now}
	f.both("apply_events", func(s Store) error { _, err := s.ApplyEvents(f.ctx, b); return err })
}

// route books one request on both stores and checks they decided alike (and, one time in four, that
// they explain it alike first).
func (f *rescoreFixture) route() Decision {
	f.t.Helper()
	req := RouteRequest{Pool: "p", RequestID: fmt.Sprintf("q%d", f.next), Random: f.r.Float64(), NowMs: f.now}
	req.SeqHashes = rescoreChain[:f.r.IntN(len(rescoreChain)+1)]
	req.ISL = int64(4*len(req.SeqHashes)) + []int64{0, 3, 16, 64}[f.r.IntN(4)]
	f.next++
	if f.r.IntN(4) == 0 {
		em, errm := f.mem.Explain(f.ctx, req)
		er, errr := f.rs.Explain(f.ctx, req)
		er.Pages, er.Snapshot = 0, nil // a paged explain (over ExplainPageCandidates ranks) says so; nothing runs between its pages here
		jm, _ := json.Marshal(em)
		jr, _ := json.Marshal(er)
		if (errm == nil) != (errr == nil) || string(jm) != string(jr) {
			f.t.Fatalf("explain %s: memory %s (%v), redis %s (%v)", req.RequestID, jm, errm, jr, errr)
		}
	}
	dm, errm := f.mem.Route(f.ctx, req)
	dr, errr := f.rs.Route(f.ctx, req)
	if (errm == nil) != (errr == nil) || !reflect.DeepEqual(dm, dr) {
		f.t.Fatalf("route %s: memory %+v (%v), redis %+v (%v)", req.RequestID, dm, errm, dr, errr)
	}
	if errm == nil {
		f.open = append(f.open, req.RequestID)
	}
	f.routes++
	return dr
}

// release ends or half-ends a random open lease on both stores.
func (f *rescoreFixture) release() {
	if len(f.open) == 0 {
		return
	}
	j := f.r.IntN(len(f.open))
	id := f.open[j]
	if f.r.IntN(3) == 0 {
		f.both("prefill_done", func(s Store) error { _, err := s.PrefillDone(f.ctx, "p", id, f.now); return err })
		return
	}
	f.open = slices.Delete(f.open, j, j+1)
	f.both("done", func(s Store) error { _, err := s.Done(f.ctx, "p", id, f.now); return err })
}

// churn is one random write on both stores: bookings (a route, checked), releases, and rarer
// registrations, removals, heartbeats and events (each walks RESCORE_TICK members of a rescoring under
// way).
func (f *rescoreFixture) churn() {
	switch k := f.r.IntN(21); {
	case k == 20:
		f.event()
	case k < 9:
		f.route()
	case k < 17:
		f.release()
	case k == 17:
		f.register()
	case k == 18:
		f.remove()
	default:
		f.heartbeat()
	}
}

// rescoring reports whether a rescoring is under way (cfg 'pbin') and the partial set's size.
func (f *rescoreFixture) rescoring() (bool, int64) {
	keys := PoolKeys(f.rs.prefix, "p")
	pend, err := f.rs.c.Do(f.ctx, f.rs.c.B().Hexists().Key(keys[0]).Field("pbin").Build()).AsBool()
	if err != nil {
		f.t.Fatal(err)
	}
	n, err := f.rs.c.Do(f.ctx, f.rs.c.B().Zcard().Key(keys[26]).Build()).AsInt64()
	if err != nil {
		f.t.Fatal(err)
	}
	return pend, n
}

// checkRescored checks lz is a from-scratch scoring by cfg (and the pool's knobs are cfg): one member per
// rank, each scored by loadKey of its load with cfg, the same candidate keys as lp, and the load multiset,
// lp as checkLoadOrder checks them (and no lc); no rescoring state is left.
func (f *rescoreFixture) checkRescored(cfg PoolConfig) {
	f.t.Helper()
	got, err := f.rs.GetPool(f.ctx, "p")
	if err != nil || !reflect.DeepEqual(got, cfg) {
		f.t.Fatalf("pool knobs %+v (%v), want %+v", got, err, cfg)
	}
	if pend, n := f.rescoring(); pend || n != 0 {
		f.t.Fatalf("rescoring state left: pending %v, lzn %d members", pend, n)
	}
	keys := PoolKeys(f.rs.prefix, "p")
	zs, err := f.rs.c.Do(f.ctx, f.rs.c.B().Zrange().Key(keys[21]).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		f.t.Fatal(err)
	}
	lp, err := f.rs.c.Do(f.ctx, f.rs.c.B().Zrange().Key(keys[24]).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		f.t.Fatal(err)
	}
	ranks := 0
	ws, err := f.mem.Workers(f.ctx, "p", f.now)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, w := range ws {
		ranks += len(w.Ranks)
	}
	var cks []string
	for _, z := range zs {
		b := []byte(z.Member)
		l := Load{PrefillTokens: int64(math.Float64frombits(binary.BigEndian.Uint64(b))),
			DecodeBlocks: int64(math.Float64frombits(binary.BigEndian.Uint64(b[8:]))),
			Requests:     int64(math.Float64frombits(binary.BigEndian.Uint64(b[16:])))}
		if k := loadKey(&cfg, l); k != z.Score {
			f.t.Fatalf("lz member of load %+v scored %v, from scratch %v", l, z.Score, k)
		}
		cks = append(cks, z.Member[24:])
	}
	slices.Sort(cks)
	slices.Sort(lp)
	if len(zs) != ranks || !slices.Equal(cks, lp) {
		f.t.Fatalf("lz: %d members for %d ranks; candidate keys equal to lp's: %v", len(zs), ranks, slices.Equal(cks, lp))
	}
	checkLoadOrder(f.t, f.rs, "p")
}

// step runs one rescore_step of generation gen (n members) and applies the knobs to the memory store if it
// switched; it reports whether no rescoring of gen is under way any more.
func (f *rescoreFixture) step(gen int64, n int) bool {
	f.t.Helper()
	done, err := f.rs.rescoreStep(f.ctx, "p", gen, n)
	if err != nil {
		f.t.Fatal(err)
	}
	f.follow()
	return done
}

// TestRedisRescoreSteps (issue 15): a change of a scoring knob is applied in bounded steps (rescore_step,
// 2 members each here: the walk takes some 30-40 steps, ZSCAN's order varying with the server's hash
// seed) while bookings (with prompt holders), releases, registrations, removals, heartbeats and events
// interleave with them (their own ticks walk too). During the walk Redis routes and explains exactly as
// the memory store with the OLD knobs (costs and order, through the fast path, which reads lz) and
// GetPool shows the old knobs; from the call that switches on, exactly as the memory store with the NEW
// knobs; and lz is then a from-scratch scoring by the new knobs. A PutPool changing another knob during
// the walk joins it; one going back to the old scoring knobs cancels it (applied at once).
func TestRedisRescoreSteps(t *testing.T) {
	old := DefaultPoolConfig(4)
	old.PrefillLoadScale, old.DecodeActiveRequestWeight = 1, 0.5
	old.LeaseTTLMs = 3600000
	f := newRescoreFixture(t, "rsc:", 300, old)
	f.checkRescored(old)

	knobs := old
	knobs.PrefillLoadScale, knobs.DecodeActiveRequestWeight = 2.5, 0.25
	gen := f.start(knobs)
	knobs.Temperature = 0.5 // a non-scoring knob too, in a second PutPool: it joins the walk
	if g, err := f.rs.putPool(f.ctx, "p", knobs); err != nil || g != gen {
		t.Fatalf("second put_pool: generation %d (%v), want %d", g, err, gen)
	}
	f.pending = &knobs
	fast0, routes0 := f.rs.fastRoutes.Load(), f.routes
	steps := 0
	for f.pending != nil {
		if got, err := f.rs.GetPool(f.ctx, "p"); err != nil || !reflect.DeepEqual(got, old) {
			t.Fatalf("step %d: GetPool %+v (%v), want the old knobs", steps, got, err)
		}
		f.route()
		for i := f.r.IntN(4); i > 0; i-- {
			f.churn()
		}
		if f.pending != nil {
			f.step(gen, 2)
			steps++
		}
		f.now++
	}
	fast, routes := f.rs.fastRoutes.Load()-fast0, f.routes-routes0
	t.Logf("%d steps, %d routes checked during the walk (%d through the fast path), %d workers", steps, routes, fast, len(f.ids))
	if steps < 20 || fast < int64(routes)/2 {
		t.Fatalf("%d steps (want a long walk), %d of %d routes fast", steps, fast, routes)
	}
	if !f.step(gen, 4) {
		t.Fatal("a step after the switch: not done")
	}
	f.checkRescored(knobs)
	for i := 0; i < 200; i++ {
		f.churn()
		f.route()
	}
	f.checkRescored(knobs)

	// Back to the scoring knobs lz has, during a walk: cancelled, applied at once.
	gen2 := f.start(old)
	if gen2 != gen+1 {
		t.Fatalf("generation %d, want %d", gen2, gen+1)
	}
	for i := 0; i < 5; i++ {
		f.step(gen2, 4)
	}
	if _, n := f.rescoring(); n == 0 {
		t.Fatal("no partial lzn after 5 steps")
	}
	back := knobs
	back.Temperature = 0.75
	if g, err := f.rs.putPool(f.ctx, "p", back); err != nil || g != 0 {
		t.Fatalf("put_pool back: generation %d (%v), want 0 (applied at once)", g, err)
	}
	f.pending = &back
	f.follow()
	f.checkRescored(back)
	for i := 0; i < 100; i++ {
		f.churn()
	}
	f.checkRescored(back)
}

// TestRedisRescoreAbandoned (issue 15): a rescoring whose PutPool caller never drives the steps is
// finished by the pool's traffic (LZ.tick in put_worker heartbeats, apply_events, remove_worker) and by
// the next PutPool; a step of a superseded generation does nothing.
func TestRedisRescoreAbandoned(t *testing.T) {
	old := DefaultPoolConfig(4)
	old.LeaseTTLMs = 3600000
	f := newRescoreFixture(t, "rsa:", 200, old)

	// Abandoned, finished by heartbeats alone (RESCORE_TICK members each).
	a := old
	a.PrefillLoadScale = 3
	gen := f.start(a)
	beats := 0
	for f.pending != nil {
		if beats++; beats > 100 {
			t.Fatal("100 heartbeats did not finish the rescoring")
		}
		if got, _ := f.rs.Pools(f.ctx); len(got) != 1 || !reflect.DeepEqual(got[0].Config, old) || !got[0].Rescoring {
			t.Fatalf("Pools %+v during the rescoring, want the old knobs, rescoring", got)
		}
		f.heartbeat()
		f.route()
	}
	t.Logf("finished by %d heartbeats", beats)
	f.checkRescored(a)
	if got, _ := f.rs.Pools(f.ctx); len(got) != 1 || got[0].Rescoring {
		t.Fatalf("Pools %+v after the rescoring", got)
	}
	if !f.step(gen, 4) {
		t.Fatal("a step after the switch: not done")
	}
	f.checkRescored(a)

	// Abandoned after a few steps; a second rescoring supersedes it; the first generation's steps are
	// no-ops; the next PutPool (the same knobs) finishes it.
	b := a
	b.DecodeActiveRequestWeight = 2
	g1 := f.start(b)
	if g1 != gen+1 {
		t.Fatalf("generation %d, want %d", g1, gen+1)
	}
	for i := 0; i < 3; i++ {
		f.step(g1, 4)
	}
	c := b
	c.PrefillLoadScale = 0.5
	g2 := f.start(c)
	if g2 != g1+1 {
		t.Fatalf("generation %d, want %d", g2, g1+1)
	}
	if pend, n := f.rescoring(); !pend || n != 0 {
		t.Fatalf("a restarted rescoring: pending %v, lzn %d members (want the old partial set dropped)", pend, n)
	}
	keys := PoolKeys(f.rs.prefix, "p")
	cur := func() string {
		v, err := f.rs.c.Do(f.ctx, f.rs.c.B().Hget().Key(keys[0]).Field("rcur").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	f.step(g2, 4)
	_, n0 := f.rescoring()
	c0 := cur()
	for i := 0; i < 3; i++ {
		if !f.step(g1, 4) {
			t.Fatal("stale step: not done (want done: nothing of that generation under way)")
		}
	}
	if _, n := f.rescoring(); n != n0 || cur() != c0 || n0 == 0 {
		t.Fatalf("stale steps changed the walk: lzn %d → %d members, cursor %s → %s", n0, n, c0, cur())
	}
	for i := 0; i < 20; i++ {
		f.churn()
		f.route()
	}
	if f.pending == nil {
		t.Fatal("traffic finished the walk already: the next PutPool is not tested")
	}
	if err := f.rs.PutPool(f.ctx, "p", c); err != nil {
		t.Fatal(err)
	}
	if !f.follow() {
		t.Fatal("PutPool returned before the switch")
	}
	f.checkRescored(c)
	for i := 0; i < 50; i++ {
		f.churn()
	}
	f.checkRescored(c)
}
