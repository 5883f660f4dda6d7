package statestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
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
	`"state":"half_open"`, `"state":"probing"`}

func outcome(v any, err error) string {
	j, _ := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%s | err %s (%s)", j, err, statestore.ErrorCode(err))
	}
	return string(j)
}

func (d *differ) check(what string, fa func(statestore.Store) (any, error)) {
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
	now     int64
	bs      int
	docs    [][]uint64 // local hashes of shared "documents"
	pools   []string
	workers []string
	dp      map[string]int
	ids     map[string]uint64 // worker/rank → last event id
	epochs  map[string]int
	engines map[string][]uint64 // worker/rank → engine hashes ever stored (for parents and removals)
	engSeq  uint64
	reqs    []string
	nreq    int
}

func newGen(seed uint64) *gen {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), bs: 4, dp: map[string]int{},
		ids: map[string]uint64{}, epochs: map[string]int{}, engines: map[string][]uint64{}}
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

func (g *gen) event(w string) statestore.Event {
	rank := 0
	if g.dp[w] > 1 {
		rank = g.r.IntN(g.dp[w] + 1) // sometimes an unknown rank
	}
	key := fmt.Sprintf("%s/%d", w, rank)
	ev := statestore.Event{DPRank: rank}
	switch x := g.r.IntN(20); {
	case x == 0: // duplicate
	case x == 1: // gap
		g.ids[key] += uint64(2 + g.r.IntN(3))
	case x == 2: // restart
		g.epochs[key]++
		g.ids[key] = 1
	default:
		g.ids[key]++
	}
	if g.r.IntN(15) != 0 {
		ev.HasEventID, ev.EventID = true, g.ids[key]
	}
	if g.epochs[key] > 0 || g.r.IntN(10) == 0 {
		ev.Epoch = fmt.Sprintf("e%d", g.epochs[key])
	}
	ev.Tier = statestore.Tier(g.f(0, 0, 0, 1, 2))
	if g.r.IntN(40) == 0 {
		ev.BlockSize = 8
	} else if g.r.IntN(2) == 0 {
		ev.BlockSize = g.bs
	}
	switch x := g.r.IntN(20); {
	case x < 13:
		ev.Kind = statestore.EventStored
		doc := g.docs[g.r.IntN(len(g.docs))]
		start := 0
		engs := g.engines[key]
		if len(engs) > 0 && g.r.IntN(3) != 0 {
			ev.HasParent, ev.Parent = true, engs[g.r.IntN(len(engs))]
			start = 1 + g.r.IntN(len(doc)-1)
		}
		if g.r.IntN(25) == 0 {
			ev.HasParent, ev.Parent = true, 999999 // unknown parent
		}
		n := 1 + g.r.IntN(min(40, len(doc)-start))
		for i := 0; i < n; i++ {
			g.engSeq++
			eh := g.engSeq
			if len(engs) > 0 && g.r.IntN(30) == 0 {
				eh = engs[g.r.IntN(len(engs))] // engine hash reuse
			}
			ev.Blocks = append(ev.Blocks, statestore.StoredBlock{EngineHash: eh, LocalHash: doc[start+i]})
			g.engines[key] = append(g.engines[key], eh)
		}
	case x < 18:
		ev.Kind = statestore.EventRemoved
		engs := g.engines[key]
		for i := 0; i < 1+g.r.IntN(6); i++ {
			if len(engs) > 0 && g.r.IntN(8) != 0 {
				ev.Removed = append(ev.Removed, engs[g.r.IntN(len(engs))])
			} else {
				ev.Removed = append(ev.Removed, 777777)
			}
		}
	default:
		ev.Kind = statestore.EventCleared
	}
	return ev
}

func (g *gen) pick(list []string) string { return list[g.r.IntN(len(list))] }

func runDiff(t *testing.T, d *differ, g *gen, steps int) {
	ctx := context.Background()
	for _, p := range g.pools {
		cfg := g.poolConfig()
		cfg.BlockSize = g.bs
		d.check("put_pool", func(s statestore.Store) (any, error) { return nil, s.PutPool(ctx, p, cfg) })
	}
	for d.step = 0; d.step < steps; d.step++ {
		pool := g.pick(g.pools)
		if g.r.IntN(200) == 0 {
			pool = "nope"
		}
		switch x := g.r.IntN(100); {
		case x < 3:
			cfg := g.poolConfig()
			d.check("put_pool "+pool, func(s statestore.Store) (any, error) { return nil, s.PutPool(ctx, pool, cfg) })
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
			g.dp[w] = max(spec.DPSize, 1)
			d.check("put_worker "+w, func(s statestore.Store) (any, error) { return nil, s.PutWorker(ctx, pool, spec, g.now) })
		case x < 10:
			w := g.pick(g.workers)
			d.check("remove_worker "+w, func(s statestore.Store) (any, error) { return nil, s.RemoveWorker(ctx, pool, w, g.now) })
		case x < 40:
			w := g.pick(g.workers)
			b := statestore.EventBatch{Pool: pool, WorkerID: w, NowMs: g.now}
			for i := 0; i < 1+g.r.IntN(5); i++ {
				b.Events = append(b.Events, g.event(w))
			}
			d.check("apply "+w, func(s statestore.Store) (any, error) { return s.ApplyEvents(ctx, b) })
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
				d.check("explain", func(s statestore.Store) (any, error) { return s.Explain(ctx, req) })
			} else {
				g.reqs = append(g.reqs, req.RequestID)
				d.check("route", func(s statestore.Store) (any, error) { return s.Route(ctx, req) })
			}
		case x < 75:
			// Forward outcomes: mostly failures, so workers cross unhealthy_after, go half-open, get probed
			// (by the routes above) and fail or heal; sometimes an unknown worker.
			w := g.pick(g.workers)
			if g.r.IntN(20) == 0 {
				w = "ghost"
			}
			ok := g.r.IntN(3) == 0
			d.check(fmt.Sprintf("report_forward %s ok=%v", w, ok), func(s statestore.Store) (any, error) {
				return s.ReportForward(ctx, pool, w, ok, g.now)
			})
		case x < 82:
			seq := g.seqFor(g.prompt())
			d.check("overlap", func(s statestore.Store) (any, error) { return s.Overlap(ctx, pool, seq, g.now) })
		case x < 92 && len(g.reqs) > 0:
			id := g.pick(g.reqs)
			p := pool
			if g.r.IntN(3) == 0 {
				p = ""
			}
			switch g.r.IntN(3) {
			case 0:
				d.check("prefill_done "+id, func(s statestore.Store) (any, error) { return s.PrefillDone(ctx, p, id, g.now) })
			case 1:
				d.check("done "+id, func(s statestore.Store) (any, error) { return s.Done(ctx, p, id, g.now) })
			default:
				d.check("renew "+id, func(s statestore.Store) (any, error) { return s.RenewLease(ctx, p, id, g.now) })
			}
		case x < 95:
			d.check("workers", func(s statestore.Store) (any, error) { return s.Workers(ctx, pool, g.now) })
		default:
			g.now += int64(g.f(0, 1, 100, 700, 1500, 4000, 20000))
		}
	}
	d.check("pools", func(s statestore.Store) (any, error) { return s.Pools(ctx) })
}

func TestRedisDifferential(t *testing.T) {
	srv := sharedRedis(t)
	steps := 10000
	seeds := []uint64{1, 2, 3, 4, 5}
	if testing.Short() {
		steps, seeds = 1500, seeds[:2]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			d := &differ{t: t, a: statestore.NewMemory(), b: newRedisStore(t, srv.Addr())}
			runDiff(t, d, newGen(seed), steps)
			t.Logf("health coverage: %v", d.seen)
			for _, m := range diffMarkers {
				if !testing.Short() && d.seen[m] == 0 {
					t.Errorf("no outcome held %s: the generator no longer reaches that path", m)
				}
			}
		})
	}
}
