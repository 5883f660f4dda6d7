package statestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// differ drives the same operations through two stores and fails at the first different outcome.
type differ struct {
	t    *testing.T
	a, b statestore.Store
	step int
	log  []string
	seen map[string]int // outcomes holding each of diffMarkers (coverage of the rarer paths)
}

// diffMarkers are outcome fragments a long run must produce at least once: the health and exclusion
// paths are only compared if the generator reaches them.
var diffMarkers = []string{`"state":"unhealthy"`, `"filtered":"unhealthy"`, `"filtered":"excluded"`, ` unhealthy`,
	`"state":"half_open"`, `"state":"probing"`, `"ttft":{`, `"ttft_terms":{`}

func outcome(v any, err error) string {
	j, _ := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%s | err %s (%s)", j, err, statestore.ErrorCode(err))
	}
	return string(j)
}

// check runs fa on both stores, fails at the first difference and returns the memory store's outcome.
func (d *differ) check(what string, fa func(statestore.Store) (any, error)) (any, error) {
	d.t.Helper()
	va, ea := fa(d.a)
	vb, eb := fa(d.b)
	oa, ob := outcome(va, ea), outcome(vb, eb)
	if d.seen == nil {
		d.seen = map[string]int{}
	}
	for _, m := range diffMarkers {
		if strings.Contains(oa, m) {
			d.seen[m]++
		}
	}
	if len(d.log) > 40 {
		d.log = d.log[1:]
	}
	d.log = append(d.log, fmt.Sprintf("#%d %s -> %s", d.step, what, oa))
	if eb != nil && statestore.ErrorCode(eb) == "internal" || eb != nil && statestore.ErrorCode(eb) == "store_unavailable" {
		d.t.Fatalf("step %d %s: redis transport/script error: %v\nrecent:\n%s", d.step, what, eb, joinLines(d.log))
	}
	if oa != ob {
		d.t.Fatalf("step %d %s differs:\n memory %s\n redis  %s\nrecent:\n%s", d.step, what, oa, ob, joinLines(d.log))
	}
	return va, ea
}

func joinLines(l []string) string {
	s := ""
	for _, x := range l {
		s += x + "\n"
	}
	return s
}

// gen is the random scenario generator.
type gen struct {
	r       *rand.Rand
	rel     *rand.Rand // the coalesced releases' own draws (RouteRequest.Releases), so r's stream stays as it was
	now     int64
	bs      int
	docs    [][]uint64 // local hashes of shared "documents"
	pools   []string
	workers []string
	poolBS  map[string]int                 // block size of each created pool
	reg     map[string]map[string]*mWorker // pool → registered worker → mirrored ranks
	engSeq  uint64
	// evDoc, evStart: the document and block index the last generated Stored event copies.
	evDoc, evStart int
	reqs           []string
	nreq           int
	cov            diffCoverage
	batch          batchCounts // the model's counts for the batch being generated
}

// batchCounts are the generator's predictions for one batch, counted once the batch's result matches.
type batchCounts struct{ stored, leaf, inner, clears int }

func newGen(seed uint64) *gen {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rel: rand.New(rand.NewPCG(seed, 0x5e1ea5e)), bs: 4, poolBS: map[string]int{},
		reg: map[string]map[string]*mWorker{}}
	for i := 0; i < 6; i++ {
		n := 10 + g.r.IntN(120)
		doc := make([]uint64, n)
		for j := range doc {
			doc[j] = uint64(g.r.IntN(50)) + 1 // small vocabulary: sibling documents share prefixes
			if j < 3 {
				doc[j] = uint64(j + 1)
			}
		}
		g.docs = append(g.docs, doc)
	}
	g.pools = []string{"default", "p{1}"}
	g.workers = []string{"w0", "w1", "w2", "w3", "w{x}", "w\x00z", "a"}
	return g
}

func (g *gen) f(choices ...float64) float64 { return choices[g.r.IntN(len(choices))] }

func (g *gen) poolConfig() statestore.PoolConfig {
	c := statestore.DefaultPoolConfig(g.bs)
	c.OverlapScoreCredit = g.f(1, 1, 0, 2, 0.5)
	c.HostCacheHitWeight = g.f(0.75, 0.3)
	c.DiskCacheHitWeight = g.f(0.25, 0.1)
	c.PrefillLoadScale = g.f(1, 1, 4, 0.7)
	c.OverlapScoreCreditDecay = g.f(0, 0, 0.5, 2)
	c.DecodeActiveRequestWeight = g.f(0, 0, 1, 64)
	c.Temperature = g.f(0, 0, 0, 0.3, 1.7)
	c.BusyPrefillFraction = g.f(0, 0, 0.5, 1.3)
	c.BusyDecodeFraction = g.f(0, 0, 0.6)
	c.KVEvents = g.r.IntN(4) != 0
	c.ApproxTTLMs = int64(g.f(120000, 3000, 800))
	c.PredictedTTLMs = int64(g.f(0, 0, 5000, 1000))
	c.SessionAffinityTTLMs = int64(g.f(0, 10000, 2000))
	c.LeaseTTLMs = int64(g.f(300000, 5000, 1500))
	c.WorkerTTLMs = int64(g.f(0, 0, 0, 8000))
	c.MaxPromptTokens = int64(g.f(1048576, 1048576, 300))
	c.UnhealthyAfter = int64(g.f(3, 1, 2, 0))
	c.UnhealthyBackoffMs = int64(g.f(10000, 700, 3000))
	if g.r.IntN(30) == 0 {
		c.BlockSize = 8 // conflicts once workers exist
	}
	if g.r.IntN(3) == 0 { // cost_model ttft: calibrated by the prefill_done steps below, clock jumps apart
		c.CostModel = statestore.CostModelTTFT
		c.TTFTPrefillRate = g.f(0, 20000, 333.3)
		c.TTFTDecodeCoeff = g.f(0, 1e-6, 0.01)
	}
	return c
}

func (g *gen) seqFor(local []uint64) []uint64 { return blockhash.Sequence(nil, local) }

// prompt returns local hashes of a prompt: a prefix of a document, sometimes diverging.
func (g *gen) prompt() []uint64 {
	doc := g.docs[g.r.IntN(len(g.docs))]
	n := g.r.IntN(len(doc) + 1)
	p := append([]uint64(nil), doc[:n]...)
	if n > 0 && g.r.IntN(4) == 0 {
		p[g.r.IntN(n)] = uint64(1000 + g.r.IntN(5))
	}
	return p
}

// registered returns the pool's registered workers, sorted.
func (g *gen) registered(pool string) []string {
	var out []string
	for w := range g.reg[pool] {
		out = append(out, w)
	}
	sort.Strings(out)
	return out
}

// event generates one event of worker w in pool and applies it to the generator's model, adding its
// predicted outcome to pred.
func (g *gen) event(pool, w string, pred *statestore.ApplyResult) statestore.Event {
	mw := g.reg[pool][w]
	dp := 1
	if mw != nil {
		dp = len(mw.ranks)
	}
	rank := 0
	if dp > 1 {
		rank = g.r.IntN(dp + 1) // sometimes an unknown rank
	}
	var r *mRank
	if mw != nil && rank < dp {
		r = mw.ranks[rank]
	} else {
		r = newMRank() // dropped by the stores: a throwaway model
	}
	ev := statestore.Event{DPRank: rank}
	switch x := g.r.IntN(25); {
	case x == 0: // duplicate
	case x == 1: // gap
		r.genID += uint64(2 + g.r.IntN(3))
	case x == 2: // engine restart: a new epoch, ids from 1
		r.genEpoch++
		r.genID = 1
	default:
		r.genID++
	}
	if g.r.IntN(15) != 0 {
		ev.HasEventID, ev.EventID = true, r.genID
	}
	if r.genEpoch > 0 || g.r.IntN(10) == 0 {
		ev.Epoch = fmt.Sprintf("e%d", r.genEpoch)
	}
	ev.Tier = statestore.Tier(g.f(0, 0, 0, 1, 2))
	if g.r.IntN(40) == 0 {
		ev.BlockSize = 8
	} else if g.r.IntN(2) == 0 {
		ev.BlockSize = g.bs
	}
	switch x := g.r.IntN(40); {
	case x < 22:
		ev.Kind = statestore.EventStored
		g.storedEvent(r, &ev)
	case x < 38 && (len(r.liveEngines(-1, false)) > 0 || g.r.IntN(8) == 0):
		ev.Kind = statestore.EventRemoved
		g.removedEvent(r, &ev)
	case x >= 38:
		ev.Kind = statestore.EventCleared
	default: // nothing held to remove: store instead
		ev.Kind = statestore.EventStored
		g.storedEvent(r, &ev)
	}
	g.cov.Events++
	// Predict the outcome (the stores' order: rank, fence, block size, kind).
	if mw == nil || rank >= dp {
		pred.UnknownWorker++
		return ev
	}
	if !r.fence(&ev, pred) {
		return ev
	}
	if ev.BlockSize > 0 && ev.BlockSize != g.poolBS[pool] {
		pred.BlockSizeMismatch++
		return ev
	}
	pred.Applied++
	switch ev.Kind {
	case statestore.EventStored:
		var parent uint64
		if ev.HasParent {
			s, ok := r.byEngine[ev.Parent]
			if !ok {
				pred.ParentNotFound++
				pred.Applied--
				return ev
			}
			parent = s
		}
		g.batch.stored++
		// The chain follows document g.evDoc from g.evStart when its parent sits just before that place.
		doc, pos := g.evDoc, g.evStart
		if ev.HasParent {
			if b := r.where[parent]; b.doc != doc || b.pos != pos-1 {
				doc = -1
			}
		} else if pos != 0 {
			doc = -1
		}
		hasParent := ev.HasParent
		for i, blk := range ev.Blocks {
			seq := seqOf(parent, hasParent, blk.LocalHash)
			if r.store(blk.EngineHash, seq, mBlock{parent: parent, hasParent: hasParent, doc: doc, pos: pos + i}, ev.Tier) {
				pred.StoredBlocks++
			}
			parent, hasParent = seq, true
		}
	case statestore.EventRemoved:
		for _, h := range ev.Removed {
			hit, in := r.remove(h, ev.Tier)
			switch {
			case !hit:
				pred.BlockNotFound++
			case in:
				pred.RemovedBlocks++
				g.batch.inner++
			default:
				pred.RemovedBlocks++
				g.batch.leaf++
			}
		}
	case statestore.EventCleared:
		g.batch.clears++
		for _, rr := range mw.ranks {
			rr.clear()
		}
	}
	return ev
}

// storedEvent fills a Stored event: mostly a continuation of a held block along its document, some
// roots, a few continuations off the document and a deliberate minority of unknown parents.
func (g *gen) storedEvent(r *mRank, ev *statestore.Event) {
	di := g.r.IntN(len(g.docs))
	start := 0
	live := r.liveEngines(-1, false)
	if len(live) > 0 && g.r.IntN(4) != 0 {
		eh := live[g.r.IntN(len(live))]
		ev.HasParent, ev.Parent = true, eh
		b := r.where[r.byEngine[eh]]
		if b.doc >= 0 && b.pos+1 < len(g.docs[b.doc]) && g.r.IntN(6) != 0 {
			di, start = b.doc, b.pos+1
		} else {
			start = 1 + g.r.IntN(len(g.docs[di])-1) // off the document: a divergent continuation
		}
	}
	if g.r.IntN(25) == 0 {
		ev.HasParent, ev.Parent = true, 999999 // unknown parent
	}
	g.evDoc, g.evStart = di, start
	doc := g.docs[di]
	n := 1 + g.r.IntN(min(24, len(doc)-start))
	for i := 0; i < n; i++ {
		g.engSeq++
		eh := g.engSeq
		if len(live) > 0 && g.r.IntN(30) == 0 {
			eh = live[g.r.IntN(len(live))] // engine hash reuse
		}
		ev.Blocks = append(ev.Blocks, statestore.StoredBlock{EngineHash: eh, LocalHash: doc[start+i]})
	}
}

// removedEvent fills a Removed event: mostly held blocks in the event's tier (leaves and inner blocks),
// a minority of hashes the rank does not hold (never stored, or held in another tier only).
func (g *gen) removedEvent(r *mRank, ev *statestore.Event) {
	var held []statestore.Tier // tiers the rank holds blocks in, device first
	for _, t := range []statestore.Tier{statestore.TierDevice, statestore.TierHost, statestore.TierDisk} {
		if len(r.liveEngines(int(t), false)) > 0 {
			held = append(held, t)
		}
	}
	if len(held) > 0 && g.r.IntN(10) != 0 { // mostly a tier the rank holds blocks in, device most often
		ev.Tier = held[min(g.r.IntN(len(held)+1), len(held)-1)]
	}
	live := r.liveEngines(int(ev.Tier), false)
	leaves := r.liveEngines(int(ev.Tier), true)
	picked := map[uint64]bool{} // a hash named twice would miss the second time
	for i := 0; i < 1+g.r.IntN(4); i++ {
		var h uint64
		switch x := g.r.IntN(16); {
		case x == 0 || len(live) == 0:
			h = 777777 + uint64(g.r.IntN(3))
		case x < 8 && len(leaves) > 0:
			h = leaves[g.r.IntN(len(leaves))]
		default:
			h = live[g.r.IntN(len(live))]
		}
		if !picked[h] || h >= 777777 && h < 777780 {
			picked[h] = true
			ev.Removed = append(ev.Removed, h)
		}
	}
}

func (g *gen) pick(list []string) string { return list[g.r.IntN(len(list))] }

func runDiff(t *testing.T, d *differ, g *gen, steps int) {
	ctx := context.Background()
	for _, p := range g.pools {
		cfg := g.poolConfig()
		cfg.BlockSize = g.bs
		g.putPool(d, p, cfg)
	}
	for d.step = 0; d.step < steps; d.step++ {
		pool := g.pick(g.pools)
		if g.r.IntN(200) == 0 {
			pool = "nope"
		}
		switch x := g.r.IntN(100); {
		case x < 3:
			g.putPool(d, pool, g.poolConfig())
		case x < 9:
			w := g.pick(g.workers)
			spec := statestore.WorkerSpec{WorkerID: w, URL: "http://" + w, DPSize: int(g.f(0, 1, 1, 2, 3)),
				TotalKVBlocks: int64(g.f(0, 200, 1000)), MaxNumBatchedTokens: int64(g.f(0, 64, 512))}
			if k := g.r.IntN(4); k == 1 {
				f := false
				spec.KVEvents = &f
			} else if k == 2 {
				tr := true
				spec.KVEvents = &tr
			}
			if _, err := d.check("put_worker "+w, func(s statestore.Store) (any, error) { return nil, s.PutWorker(ctx, pool, spec, g.now) }); err == nil {
				mw := g.reg[pool][w]
				if mw == nil {
					mw = &mWorker{}
					g.reg[pool][w] = mw
				}
				for len(mw.ranks) < max(spec.DPSize, 1) {
					mw.ranks = append(mw.ranks, newMRank())
				}
				mw.ranks = mw.ranks[:max(spec.DPSize, 1)] // dp_size shrank: the extra ranks are gone
				g.compareWorkers(d, pool)
				g.comparePools(d) // the pool's worker count
			}
		case x < 10:
			w := g.pick(g.workers)
			if _, err := d.check("remove_worker "+w, func(s statestore.Store) (any, error) { return nil, s.RemoveWorker(ctx, pool, w, g.now) }); err == nil {
				delete(g.reg[pool], w)
				g.compareWorkers(d, pool)
				g.comparePools(d)
			}
		case x < 40:
			w := g.pick(g.workers)
			if reg := g.registered(pool); len(reg) > 0 && g.r.IntN(12) != 0 {
				w = g.pick(reg) // mostly registered workers: events of unknown ones are a minority
			}
			b := statestore.EventBatch{Pool: pool, WorkerID: w, NowMs: g.now}
			var pred statestore.ApplyResult
			g.batch = batchCounts{}
			for i := 0; i < 1+g.r.IntN(5); i++ {
				b.Events = append(b.Events, g.event(pool, w, &pred))
			}
			v, err := d.check("apply "+w, func(s statestore.Store) (any, error) { return s.ApplyEvents(ctx, b) })
			if err == nil {
				g.countApply(v.(statestore.ApplyResult), pred)
				g.compareWorkers(d, pool)
			}
		case x < 72:
			local := g.prompt()
			req := statestore.RouteRequest{Pool: pool, SeqHashes: g.seqFor(local), NowMs: g.now, Random: g.r.Float64()}
			req.ISL = int64(len(local)*g.bs + g.r.IntN(g.bs))
			if g.r.IntN(3) == 0 {
				req.SessionID = fmt.Sprintf("s%d", g.r.IntN(4))
			}
			if g.r.IntN(12) == 0 {
				req.PinnedWorker = g.pick(g.workers)
			}
			if g.r.IntN(10) == 0 {
				req.AllowedWorkers = []string{g.pick(g.workers), g.pick(g.workers)}
			}
			if g.r.IntN(6) == 0 {
				req.ExcludedWorkers = []string{g.pick(g.workers)}
				if g.r.IntN(3) == 0 {
					req.ExcludedWorkers = append(req.ExcludedWorkers, g.pick(g.workers), "ghost")
				}
			}
			if g.r.IntN(4) == 0 {
				v := g.f(0, 0.3, 2, 1.1)
				req.Overrides.Temperature = &v
			}
			if g.r.IntN(5) == 0 {
				v := g.f(0, 1, 3)
				req.Overrides.OverlapScoreCredit = &v
			}
			if g.r.IntN(6) == 0 {
				v := g.f(0.2, 0.5, 1)
				req.Overrides.BusyPrefillFraction = &v
			}
			if g.r.IntN(8) == 0 {
				v := g.f(0.5, 1)
				req.Overrides.OverlapScoreCreditDecay = &v
			}
			if g.r.IntN(60) == 0 {
				req.ISL = int64(len(local)*g.bs) - 1 // too many hashes for the isl
			}
			if g.r.IntN(10) == 0 && len(g.reqs) > 0 {
				req.RequestID = g.pick(g.reqs) // may still hold a lease: conflict
			} else {
				g.nreq++
				req.RequestID = fmt.Sprintf("r%d", g.nreq)
			}
			if g.r.IntN(6) == 0 {
				g.cov.Explains++
				v, err := d.check("explain", func(s statestore.Store) (any, error) {
					ex, err := s.Explain(ctx, req)
					if ex.Pages > 1 { // a paged explain is the one-call form but for saying so
						if ex.Snapshot == nil || *ex.Snapshot {
							d.t.Fatalf("step %d: %d pages without snapshot false", d.step, ex.Pages)
						}
						g.cov.PagedExplains++
						ex.Pages, ex.Snapshot = 0, nil
					}
					return ex, err
				})
				if err == nil {
					for _, c := range v.(statestore.Explanation).Candidates {
						g.cov.SoftHits += b2i(c.PredictedBlocks > 0)
						g.cov.HostMatched += b2i(c.HostBlocks > 0)
						g.cov.DiskMatched += b2i(c.DiskBlocks > 0)
					}
				}
			} else {
				// Coalesced dones (RouteRequest.Releases): earlier requests' leases, held or not, an id
				// twice, an unknown one; both stores end them before deciding (and only if it validates).
				if g.rel.IntN(4) == 0 && len(g.reqs) > 0 {
					for range 1 + g.rel.IntN(4) {
						req.Releases = append(req.Releases, g.reqs[g.rel.IntN(len(g.reqs))])
					}
					if g.rel.IntN(6) == 0 {
						req.Releases = append(req.Releases, req.Releases[0], "ghost")
					}
					g.cov.RouteReleases += len(req.Releases)
				}
				g.reqs = append(g.reqs, req.RequestID)
				v, err := d.check("route", func(s statestore.Store) (any, error) { return s.Route(ctx, req) })
				if err == nil {
					dec := v.(statestore.Decision)
					g.cov.Routes++
					if dec.OverlapBlocks > 0 {
						g.cov.RoutesOverlap++
					}
					if dec.SessionHit {
						g.cov.SessionHits++
					}
					g.compareWorkers(d, pool)
				}
			}
		case x < 75:
			// Forward outcomes: mostly failures, so workers cross unhealthy_after, go half-open, get probed
			// (by the routes above) and fail or heal; sometimes an unknown worker.
			w := g.pick(g.workers)
			if g.r.IntN(20) == 0 {
				w = "ghost"
			}
			ok := g.r.IntN(3) == 0
			if _, err := d.check(fmt.Sprintf("report_forward %s ok=%v", w, ok), func(s statestore.Store) (any, error) {
				return s.ReportForward(ctx, pool, w, ok, g.now)
			}); err == nil {
				g.compareWorkers(d, pool)
			}
		case x < 82:
			seq := g.seqFor(g.prompt())
			d.check("overlap", func(s statestore.Store) (any, error) { return s.Overlap(ctx, pool, seq, g.now) })
		case x < 92 && len(g.reqs) > 0:
			id := g.pick(g.reqs)
			p := pool
			if g.r.IntN(3) == 0 {
				p = ""
			}
			var found any
			switch g.r.IntN(3) {
			case 0:
				found, _ = d.check("prefill_done "+id, func(s statestore.Store) (any, error) { return s.PrefillDone(ctx, p, id, g.now) })
			case 1:
				found, _ = d.check("done "+id, func(s statestore.Store) (any, error) { return s.Done(ctx, p, id, g.now) })
			default:
				found, _ = d.check("renew "+id, func(s statestore.Store) (any, error) { return s.RenewLease(ctx, p, id, g.now) })
			}
			if found == true {
				g.compareWorkers(d, pool)
			}
		case x < 95:
			d.check("workers", func(s statestore.Store) (any, error) { return s.Workers(ctx, pool, g.now) })
		default:
			g.now += int64(g.f(0, 1, 100, 700, 1500, 4000, 20000))
			g.compareWorkers(d, pool) // liveness and lease expiry move with the clock
		}
	}
	d.check("pools", func(s statestore.Store) (any, error) { return s.Pools(ctx) })
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// putPool creates or updates a pool on both stores, then compares the pool as both report it.
func (g *gen) putPool(d *differ, pool string, cfg statestore.PoolConfig) {
	ctx := context.Background()
	if _, err := d.check("put_pool "+pool, func(s statestore.Store) (any, error) { return nil, s.PutPool(ctx, pool, cfg) }); err == nil {
		g.poolBS[pool] = cfg.BlockSize
		if g.reg[pool] == nil {
			g.reg[pool] = map[string]*mWorker{}
		}
	}
	d.check("get_pool "+pool, func(s statestore.Store) (any, error) { return s.GetPool(ctx, pool) })
	g.comparePools(d)
}

// comparePools compares the pool listing (configs and worker counts).
func (g *gen) comparePools(d *differ) {
	d.check("pools", func(s statestore.Store) (any, error) { return s.Pools(context.Background()) })
}

// compareWorkers compares the pool's workers listing (loads, ranks, fences, health) after a step that
// may have changed it.
func (g *gen) compareWorkers(d *differ, pool string) {
	g.cov.WorkersCompared++
	d.check("workers "+pool, func(s statestore.Store) (any, error) { return s.Workers(context.Background(), pool, g.now) })
}

// countApply adds an applied batch to the coverage counters; the generator's own predictions (leaf and
// inner removals) count only when its model predicted the batch exactly.
func (g *gen) countApply(got, pred statestore.ApplyResult) {
	c := &g.cov
	c.ParentMissing += got.ParentNotFound
	c.StoredBlocks += got.StoredBlocks
	c.RemovedHits += got.RemovedBlocks
	c.RemovedUnknown += got.BlockNotFound
	c.UnknownWorker += got.UnknownWorker
	c.Restarts += got.Restarts
	pred.Gaps = got.Gaps // the model does not track gaps (they change nothing it steers by)
	if got != pred {
		c.ModelDisagree++
		return
	}
	c.ModelAgree++
	c.StoredApplied += g.batch.stored
	c.RemovedLeaf += g.batch.leaf
	c.RemovedInner += g.batch.inner
	c.Clears += g.batch.clears
}

func TestRedisDifferential(t *testing.T) {
	srv := sharedRedis(t)
	steps := 6000
	seeds := []uint64{1, 2, 3, 4, 5}
	if testing.Short() {
		steps, seeds = 1500, seeds[:2]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rs := newRedisStore(t, srv.Addr())
			if seed%2 == 0 { // paged explain (issue 15): pages of 1–3 ranks, so most explains take several
				statestore.SetExplainPaging(rs, int(seed/2%3+1), nil)
			}
			d := &differ{t: t, a: statestore.NewMemory(), b: rs}
			g := newGen(seed)
			runDiff(t, d, g, steps)
			if seed%2 == 0 && g.cov.PagedExplains*2 < g.cov.Explains {
				t.Errorf("only %d of %d explains were paged", g.cov.PagedExplains, g.cov.Explains)
			}
			t.Logf("health coverage: %v", d.seen)
			t.Logf("coverage: %+v", g.cov)
			assertCoverage(t, g.cov, steps)
			for _, m := range diffMarkers {
				if !testing.Short() && d.seen[m] == 0 {
					t.Errorf("no outcome held %s: the generator no longer reaches that path", m)
				}
			}
		})
	}
}

// TestRedisDifferentialWorkBudget: the differential run with a work budget of one Redis command, so every
// apply_events call stops after its first piece: events split across calls (24-block events in 16-block
// pieces), continuations of dropped events (duplicates, unknown parents and ranks) dropped by the caller
// instead of the script, and predictions carried across budget stops — still the memory store's decisions.
func TestRedisDifferentialWorkBudget(t *testing.T) {
	srv := sharedRedis(t)
	defer statestore.SetApplyWorkBudget(1)()
	steps := 3000
	if testing.Short() {
		steps = 1000
	}
	d := &differ{t: t, a: statestore.NewMemory(), b: newRedisStore(t, srv.Addr())}
	g := newGen(6)
	runDiff(t, d, g, steps)
	t.Logf("coverage: %+v", g.cov)
	assertCoverage(t, g.cov, steps)
}

// TestRedisDifferentialEngineMapGrowth: the differential run with an engine-map load of 1/32 block per
// bucket and an event-index load of 1/512 entry per bucket, so every rank past 8 held blocks and every
// pool past 32 index entries splits buckets (lib.lua lh_split) while the generator stores, removes,
// clears and restarts, and route reads the index: still the memory store's decisions, and the maps grew.
func TestRedisDifferentialEngineMapGrowth(t *testing.T) {
	srv := sharedRedis(t)
	defer statestore.SetEngineMapLoad(1.0 / 32)()
	defer statestore.SetEventIndexLoad(1.0 / 512)()
	steps := 3000
	if testing.Short() {
		steps = 1000
	}
	rs := newRedisStore(t, srv.Addr())
	d := &differ{t: t, a: statestore.NewMemory(), b: rs}
	g := newGen(7)
	runDiff(t, d, g, steps)
	t.Logf("coverage: %+v", g.cov)
	assertCoverage(t, g.cov, steps)
	grown, indexes := 0, 0
	for _, pool := range g.pools {
		counts, err := statestore.EngineMapBuckets(context.Background(), rs, pool)
		if err != nil {
			t.Fatal(err)
		}
		for slot, n := range counts {
			if slot == "e" && n > 16384 {
				indexes++
			} else if slot != "e" && n > 256 {
				grown++
			}
		}
	}
	if grown == 0 || indexes == 0 {
		t.Errorf("%d engine maps and %d event indexes grew: the run did not exercise the splits", grown, indexes)
	}
	t.Logf("%d engine maps and %d event indexes grew", grown, indexes)
}

// assertCoverage fails the run when the generator no longer exercises what the differential test is for.
// Minimums are for 6000 steps (about a third of what seeds 1–5 reach) and scale with the step count;
// the deliberate minorities (unknown hashes, unknown parents, unknown workers) have upper bounds too.
func assertCoverage(t *testing.T, c diffCoverage, steps int) {
	t.Helper()
	at := func(n int) int { return max(1, n*steps/6000) }
	atLeast := []struct {
		name     string
		got, min int
	}{
		{"removed hashes that hit a held block", c.RemovedHits, at(700)},
		{"leaf removals", c.RemovedLeaf, at(400)},
		{"inner-block removals", c.RemovedInner, at(200)},
		{"removals of unknown hashes", c.RemovedUnknown, at(50)},
		{"stored events applied", c.StoredApplied, at(700)},
		{"stored events dropped for an unknown parent", c.ParentMissing, at(20)},
		{"events of unknown workers or ranks", c.UnknownWorker, at(50)},
		{"restarts (new epoch)", c.Restarts, at(40)},
		{"clears", c.Clears, at(50)},
		{"routes with overlap > 0", c.RoutesOverlap, max(at(300), c.Routes/3)},
		{"session hits", c.SessionHits, at(40)},
		{"soft-entry (approximate/predicted) matches", c.SoftHits, at(200)},
		{"host-tier matches", c.HostMatched, at(100)},
		{"disk-tier matches", c.DiskMatched, at(80)},
		{"workers listings compared", c.WorkersCompared, at(2000)},
		{"coalesced releases carried by routes", c.RouteReleases, at(300)},
	}
	for _, a := range atLeast {
		if a.got < a.min {
			t.Errorf("coverage: %s = %d, want >= %d (the generator has degraded)", a.name, a.got, a.min)
		}
	}
	atMost := []struct {
		name     string
		got, max int
	}{
		{"removals of unknown hashes", c.RemovedUnknown, c.RemovedHits / 3},
		{"stored events dropped for an unknown parent", c.ParentMissing, c.StoredApplied / 5},
		{"events of unknown workers or ranks", c.UnknownWorker, c.Events / 5},
		{"batches the generator's model mispredicted", c.ModelDisagree, c.ModelAgree / 20},
	}
	for _, a := range atMost {
		if a.got > a.max {
			t.Errorf("coverage: %s = %d, want <= %d (a deliberate minority became common)", a.name, a.got, a.max)
		}
	}
}
