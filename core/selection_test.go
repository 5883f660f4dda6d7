package core

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// fixture is a pool "default" of block size 4 in the memory store, driven through a Router with a
// manual clock. Costs in these tests are computed by hand from SPEC §6.2.
type fixture struct {
	t     *testing.T
	ctx   context.Context
	clock int64
	rt    *Router
	ev    map[string]uint64
}

func newFixture(t *testing.T, knobs string) *fixture {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), ev: map[string]uint64{}}
	f.rt = New(statestore.NewMemory(), Options{Now: func() int64 { return f.clock }, PoolCacheTTL: -1})
	cfg, err := ParsePoolConfig(statestore.DefaultPoolConfig(4), []byte(knobs))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.rt.PutPool(f.ctx, "", cfg); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) worker(id string, mod func(*statestore.WorkerSpec)) {
	f.t.Helper()
	s := statestore.WorkerSpec{WorkerID: id, URL: "http://" + id}
	if mod != nil {
		mod(&s)
	}
	if err := f.rt.PutWorker(f.ctx, "", s, 0); err != nil {
		f.t.Fatal(err)
	}
}

// store puts a root chain of local hashes on a worker, in a tier.
func (f *fixture) store(worker, tier string, local ...uint64) {
	f.t.Helper()
	f.ev[worker]++
	id := f.ev[worker]
	blocks := make([]string, len(local))
	for i, h := range local {
		blocks[i] = `{"block_hash":` + u(h+5000) + `,"tokens_hash":` + u(h) + `}`
	}
	raw := `{"event_id":` + u(id) + `,"data":{"stored":{"parent_hash":null,"blocks":[` + strings.Join(blocks, ",") + `]}}}`
	ev := RouterEvent{WorkerID: FlexString(worker), StorageTier: tier}
	if err := strictUnmarshal([]byte(raw), &ev.Event); err != nil {
		f.t.Fatal(err)
	}
	res, bad, err := f.rt.ApplyRouterEvents(f.ctx, []RouterEvent{ev})
	if err != nil || len(bad) > 0 || res.Applied != 1 {
		f.t.Fatalf("store: %v %v %+v", err, bad, res)
	}
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

type routeOpt func(*RouteInput)

func hashes(h ...uint64) routeOpt {
	return func(in *RouteInput) {
		for _, x := range h {
			in.LocalHashes = append(in.LocalHashes, Hash(x))
		}
	}
}
func isl(n int64) routeOpt         { return func(in *RouteInput) { in.ISL = &n } }
func rnd(r float64) routeOpt       { return func(in *RouteInput) { in.Random = &r } }
func pinned(w string) routeOpt     { return func(in *RouteInput) { in.PinnedWorker = w } }
func allowed(w ...string) routeOpt { return func(in *RouteInput) { in.AllowedWorkers = w } }
func session(s string) routeOpt    { return func(in *RouteInput) { in.SessionID = s } }
func reqID(id string) routeOpt     { return func(in *RouteInput) { in.RequestID = id } }
func knob(name, v string) routeOpt {
	return func(in *RouteInput) {
		if in.Config == nil {
			in.Config = map[string]json.RawMessage{}
		}
		in.Config[name] = json.RawMessage(v)
	}
}

func (f *fixture) input(opts ...routeOpt) RouteInput {
	zero := 0.0
	in := RouteInput{Random: &zero}
	for _, o := range opts {
		o(&in)
	}
	return in
}

func (f *fixture) route(opts ...routeOpt) statestore.Decision {
	f.t.Helper()
	d, err := f.rt.Route(f.ctx, f.input(opts...))
	if err != nil {
		f.t.Fatalf("route: %v", err)
	}
	return d
}

func (f *fixture) expect(d statestore.Decision, worker string, cost float64) {
	f.t.Helper()
	if d.WorkerID != worker || math.Abs(d.Cost-cost) > 1e-9 {
		f.t.Fatalf("decision %s cost %v, want %s cost %v", d.WorkerID, d.Cost, worker, cost)
	}
}

func (f *fixture) load(worker string) statestore.RankInfo {
	f.t.Helper()
	ws, err := f.rt.Workers(f.ctx, "")
	if err != nil {
		f.t.Fatal(err)
	}
	for _, w := range ws {
		if w.WorkerID == worker {
			return w.Ranks[0]
		}
	}
	f.t.Fatalf("no worker %s", worker)
	return statestore.RankInfo{}
}

func TestOverlapWinsOverIdleColdWorker(t *testing.T) {
	f := newFixture(t, `{}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.store("w1", "", 1, 2, 3, 4)
	// w1: raw (0+16)/4 = 4, credit 4 → 0, + decode 4 = 4; w0: 4 + 4 = 8.
	d := f.route(hashes(1, 2, 3, 4))
	f.expect(d, "w1", 4)
	if d.OverlapBlocks != 4 || d.RequiredBlocks != 4 {
		t.Fatalf("decision %+v", d)
	}
}

func TestBusyWarmWorkerLosesToIdleColdOne(t *testing.T) {
	f := newFixture(t, `{}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.store("w0", "", 1, 2)
	f.route(pinned("w0"), isl(40)) // w0: prefill 40, decode 10, 1 request
	// w0: raw (40+16)/4 = 14, credit 2 → 12, + decode 10+4 → 26; w1: 4 + 4 = 8.
	f.expect(f.route(hashes(1, 2, 3, 4)), "w1", 8)
}

func TestHostTierCredit(t *testing.T) {
	f := newFixture(t, `{}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.store("w0", "host_pinned", 1, 2, 3, 4)
	// w0: raw 4 − 0.75·4 = 1, + 4 = 5; w1: 8.
	f.expect(f.route(hashes(1, 2, 3, 4)), "w0", 5)
	// Booked prefill counts only device blocks: all 16 tokens.
	if l := f.load("w0"); l.ActivePrefillTokens != 16 {
		t.Fatalf("booked prefill %d, want 16", l.ActivePrefillTokens)
	}
}

func TestZeroCreditIgnoresCacheAndTiesSplitByRandom(t *testing.T) {
	f := newFixture(t, `{"overlap_score_credit":0}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.store("w1", "", 1, 2, 3, 4)
	ex, err := f.rt.Explain(f.ctx, f.input(hashes(1, 2, 3, 4)))
	if err != nil || ex.Decision.WorkerID != "w0" || ex.Decision.Cost != 8 {
		t.Fatalf("r=0: %+v %v", ex.Decision, err)
	}
	ex, _ = f.rt.Explain(f.ctx, f.input(hashes(1, 2, 3, 4), rnd(0.6)))
	if ex.Decision.WorkerID != "w1" || ex.Decision.Cost != 8 {
		t.Fatalf("r=0.6: %+v", ex.Decision)
	}
	if ex.Candidates[1].DeviceBlocks != 4 || ex.Candidates[1].Credit != 0 {
		t.Fatalf("explain w1: %+v", ex.Candidates[1])
	}
}

func TestCreditAboveOneClampsPrefillAtZero(t *testing.T) {
	f := newFixture(t, `{"overlap_score_credit":2}`)
	f.worker("w0", nil)
	f.store("w0", "", 1, 2, 3, 4)
	// raw 4 − 2·4 = −4 → 0; + decode 4.
	f.expect(f.route(hashes(1, 2, 3, 4)), "w0", 4)
}

func TestDecayFlipsHotWarmWorkerToColdIdleOne(t *testing.T) {
	warm := make([]uint64, 40)
	for i := range warm {
		warm[i] = uint64(i + 1)
	}
	for _, tc := range []struct {
		decay string
		want  string
		cost  float64
	}{
		// w0: raw (16+160)/4 = 44, credit 40 → 4, + decode 4+40 → 48; w1: 40 + 40 = 80.
		{"0", "w0", 48},
		// decay = 1/(1 + 100·(16/4)/40) = 1/11; w0: 44 − 40/11 + 44 = 84.36…; w1: 80.
		{"100", "w1", 80},
	} {
		f := newFixture(t, `{}`)
		f.worker("w0", nil)
		f.worker("w1", nil)
		f.store("w0", "", warm...)
		f.route(pinned("w0"), isl(16))
		f.expect(f.route(hashes(warm...), knob("overlap_score_credit_decay", tc.decay)), tc.want, tc.cost)
	}
}

func TestDecodeActiveRequestWeight(t *testing.T) {
	f := newFixture(t, `{}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.route(pinned("w0"), isl(0)) // one request, no tokens
	// Without the weight both cost 8 and r=0 takes w0; with weight 10, w0 costs 18.
	if ex, _ := f.rt.Explain(f.ctx, f.input(isl(16))); ex.Decision.WorkerID != "w0" {
		t.Fatalf("weight 0: %+v", ex.Decision)
	}
	ex, _ := f.rt.Explain(f.ctx, f.input(isl(16), knob("decode_active_request_weight", "10")))
	if ex.Decision.WorkerID != "w1" || ex.Candidates[0].Cost != 18 {
		t.Fatalf("weight 10: %+v %+v", ex.Decision, ex.Candidates[0])
	}
}

func TestBusyThresholdsFilterAndAllBusyIsClearError(t *testing.T) {
	f := newFixture(t, `{"busy_prefill_fraction":0.5}`)
	cap := func(s *statestore.WorkerSpec) { s.MaxNumBatchedTokens = 100 }
	f.worker("w0", cap)
	f.worker("w1", cap)
	f.route(pinned("w0"), isl(60)) // 60 > 0.5·100: w0 busy
	f.expect(f.route(isl(4)), "w1", 1+1)
	f.route(pinned("w1"), isl(60))
	_, err := f.rt.Route(f.ctx, f.input(isl(4)))
	var ne *statestore.NoEligibleError
	if !errors.As(err, &ne) || ne.Reasons[statestore.ReasonBusyPrefill] != 2 || !strings.Contains(err.Error(), "2 busy_prefill") {
		t.Fatalf("all busy: %v", err)
	}
	ex, err := f.rt.Explain(f.ctx, f.input(isl(4)))
	if err != nil || ex.Error == nil || ex.Candidates[0].Filtered != statestore.ReasonBusyPrefill {
		t.Fatalf("explain all busy: %+v %v", ex, err)
	}
	// Decode threshold.
	g := newFixture(t, `{"busy_decode_fraction":0.5}`)
	g.worker("w0", func(s *statestore.WorkerSpec) { s.TotalKVBlocks = 10 })
	g.route(isl(24)) // 6 blocks > 5
	if _, err := g.rt.Route(g.ctx, g.input(isl(4))); !errors.Is(err, statestore.ErrNoEligibleWorker) {
		t.Fatalf("decode busy: %v", err)
	}
}

func TestPinnedAndAllowList(t *testing.T) {
	f := newFixture(t, `{}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.worker("w2", nil)
	f.store("w0", "", 1, 2, 3, 4)
	f.expect(f.route(hashes(1, 2, 3, 4), pinned("w1")), "w1", 8)
	f.expect(f.route(hashes(1, 2, 3, 4), allowed("w1", "w2")), "w2", 8) // w1 is now loaded: 8+4 vs 8
	if _, err := f.rt.Route(f.ctx, f.input(pinned("nope"))); !errors.Is(err, statestore.ErrNoEligibleWorker) {
		t.Fatalf("unknown pinned worker: %v", err)
	}
}

func TestTemperatureSpreadsPicksBySoftmax(t *testing.T) {
	f := newFixture(t, `{"temperature":0.5}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.worker("w2", nil)
	f.store("w1", "", 1, 2)
	f.store("w2", "", 1, 2, 3, 4)
	// costs: w0 8, w1 6, w2 4; normalised (c−4)/4; p ∝ exp(−x/0.5) = e^-2, e^-1, 1.
	w := []float64{math.Exp(-2), math.Exp(-1), 1}
	total := w[0] + w[1] + w[2]
	const n = 10000
	counts := map[string]int{}
	for i := range n {
		r := (float64(i) + 0.5) / n
		ex, err := f.rt.Explain(f.ctx, f.input(hashes(1, 2, 3, 4), rnd(r)))
		if err != nil {
			t.Fatal(err)
		}
		counts[ex.Decision.WorkerID]++
	}
	for i, id := range []string{"w0", "w1", "w2"} {
		want := w[i] / total * n
		if math.Abs(float64(counts[id])-want) > 1.5 {
			t.Fatalf("%s picked %d times, want %.1f (counts %v)", id, counts[id], want, counts)
		}
	}
}

func TestLeaseExpiryAndIdempotentDone(t *testing.T) {
	f := newFixture(t, `{"lease_ttl_ms":1000}`)
	f.worker("w0", nil)
	f.route(isl(16), reqID("a"))
	f.clock = 999
	if l := f.load("w0"); l.ActivePrefillTokens != 16 || l.ActiveDecodeBlocks != 4 || l.ActiveRequests != 1 {
		t.Fatalf("before expiry: %+v", l)
	}
	f.clock = 1000
	if l := f.load("w0"); l.ActivePrefillTokens != 0 || l.ActiveDecodeBlocks != 0 || l.ActiveRequests != 0 {
		t.Fatalf("after expiry: %+v", l)
	}
	f.route(isl(16), reqID("b"))
	if ok, _ := f.rt.PrefillDone(f.ctx, "", "b"); !ok {
		t.Fatal("prefill_done of a live lease")
	}
	if l := f.load("w0"); l.ActivePrefillTokens != 0 || l.ActiveDecodeBlocks != 4 {
		t.Fatalf("after prefill_done: %+v", l)
	}
	for i, want := range []bool{true, false} {
		if ok, err := f.rt.Done(f.ctx, "", "b"); ok != want || err != nil {
			t.Fatalf("done #%d: %v %v", i, ok, err)
		}
	}
	if l := f.load("w0"); l != (statestore.RankInfo{}) {
		t.Fatalf("after done twice: %+v", l)
	}
}

func TestSessionAffinity(t *testing.T) {
	f := newFixture(t, `{"session_affinity_ttl_ms":1000}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.route(session("s"), isl(16), reqID("r1"), rnd(0.9)) // tie → w1, bound
	f.store("w0", "", 1, 2, 3, 4)
	// w0 is now far better, but the live binding wins.
	if d := f.route(session("s"), hashes(1, 2, 3, 4), reqID("r2")); d.WorkerID != "w1" || !d.SessionHit {
		t.Fatalf("binding not honoured: %+v", d)
	}
	f.rt.Done(f.ctx, "", "r1")
	f.clock = 500
	f.rt.Done(f.ctx, "", "r2") // idle from 500
	f.clock = 1499
	if d := f.route(session("s"), hashes(1, 2, 3, 4), reqID("r3")); d.WorkerID != "w1" {
		t.Fatalf("binding expired early: %+v", d)
	}
	f.rt.Done(f.ctx, "", "r3") // idle from 1499
	f.clock = 2499
	if d := f.route(session("s"), hashes(1, 2, 3, 4), reqID("r4")); d.WorkerID != "w0" || d.SessionHit {
		t.Fatalf("idle binding should have expired: %+v", d)
	}
	// Now bound to w0; removing w0 moves it.
	f.worker("w2", nil)
	if err := f.rt.RemoveWorker(f.ctx, "", "w0"); err != nil {
		t.Fatal(err)
	}
	if d := f.route(session("s"), hashes(1, 2, 3, 4), reqID("r5")); d.WorkerID == "w0" || d.SessionHit {
		t.Fatalf("binding to a removed worker: %+v", d)
	}
}

func TestApproximateModeTTL(t *testing.T) {
	f := newFixture(t, `{"kv_events":false,"approx_ttl_ms":1000}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.route(hashes(1, 2, 3, 4), rnd(0.9), reqID("a")) // tie → w1, indexed for 1 s
	f.rt.Done(f.ctx, "", "a")
	f.clock = 999
	if s, _ := f.rt.Overlap(f.ctx, "", []uint64{1, 2, 3, 4}); len(s) != 1 || s[0].WorkerID != "w1" || s[0].Blocks != 4 {
		t.Fatalf("approximate entry: %+v", s)
	}
	f.expect(f.route(hashes(1, 2, 3, 5), reqID("b")), "w1", 1+4) // 3 predicted blocks: raw 4 − 3 + 4
	f.rt.Done(f.ctx, "", "b")
	f.clock = 1998 // [1,2,3] slid to expire at 1999; block 4 expired at 1000
	if s, _ := f.rt.Overlap(f.ctx, "", []uint64{1, 2, 3, 4}); len(s) != 1 || s[0].Blocks != 3 {
		t.Fatalf("sliding TTL: %+v", s)
	}
	f.clock = 1999
	if s, _ := f.rt.Overlap(f.ctx, "", []uint64{1, 2, 3, 4}); len(s) != 0 {
		t.Fatalf("expired entries still count: %+v", s)
	}
}

func TestPredictOnRouteSiblingFollowsFirst(t *testing.T) {
	// Agentic knobs: credit 2, prefill scale 4, request weight 64.
	f := newFixture(t, `{"predicted_ttl_ms":500,"overlap_score_credit":2,"prefill_load_scale":4,"decode_active_request_weight":64}`)
	f.worker("w0", nil)
	f.worker("w1", nil)
	f.worker("w2", nil)
	first := f.route(hashes(1, 2, 3, 4), rnd(0.5)) // three-way tie → index 1 = w1
	if first.WorkerID != "w1" {
		t.Fatalf("first: %+v", first)
	}
	// A 64-block prompt: w0 and w2 cost 4·64 + 64 = 320, w1 (loaded) 404: tie w0/w2, r=0.99 → w2.
	// Its sibling, before any Stored event: w2 = 4·max(128 − 2·64, 0) + 128 + 64 = 192 < w0's 320.
	long := make([]uint64, 64)
	for i := range long {
		long[i] = uint64(100 + i)
	}
	a := f.route(hashes(long...), rnd(0.99)) // tie among w0, w2 (w1 loaded) → w2
	b := f.route(hashes(long...), rnd(0))
	if b.WorkerID != a.WorkerID || b.OverlapBlocks != 64 {
		t.Fatalf("sibling went to %s (overlap %d), first went to %s", b.WorkerID, b.OverlapBlocks, a.WorkerID)
	}
	f.clock = 500
	c := f.route(hashes(long...), rnd(0), isl(256))
	if c.OverlapBlocks != 0 {
		t.Fatalf("prediction outlived its TTL: %+v", c)
	}
}
