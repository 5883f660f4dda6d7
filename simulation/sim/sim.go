package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/statestore"
)

// poolName is the router pool every simulated fleet registers in.
const poolName = "sim"

// simWorker is one simulated engine and what the simulator measures of it.
type simWorker struct {
	id      string
	eng     *engine.Engine
	eventID uint64
	busyMs  float64
	active  int                 // routed, not finished (least-loaded's load)
	stored  map[uint64]struct{} // CheckEvents: engine hashes stored and not removed
	nextMs  float64             // the engine's NextEventTime while it has work (in the run's stepQueue)
	qpos    int                 // position in the stepQueue, -1 = idle (not queued)
}

// stepQueue is a min-heap of the workers that have work, by next step time then worker index: the order
// the former scan of every worker on every event chose (the earliest, the lowest index among equals), so
// the next step is found in O(1) and a worker's change costs O(log W) instead of O(W) per event (the
// scan made a run quadratic in the fleet size: events grow with the workers too).
type stepQueue struct {
	ws []*simWorker
	ix []int // worker indexes
}

func (q stepQueue) Len() int { return len(q.ix) }
func (q stepQueue) Less(i, j int) bool {
	a, b := q.ws[q.ix[i]], q.ws[q.ix[j]]
	if a.nextMs != b.nextMs {
		return a.nextMs < b.nextMs
	}
	return q.ix[i] < q.ix[j]
}
func (q stepQueue) Swap(i, j int) {
	q.ix[i], q.ix[j] = q.ix[j], q.ix[i]
	q.ws[q.ix[i]].qpos, q.ws[q.ix[j]].qpos = i, j
}
func (q *stepQueue) Push(x any) {
	wi := x.(int)
	q.ws[wi].qpos = len(q.ix)
	q.ix = append(q.ix, wi)
}
func (q *stepQueue) Pop() any {
	wi := q.ix[len(q.ix)-1]
	q.ix = q.ix[:len(q.ix)-1]
	q.ws[wi].qpos = -1
	return wi
}

// requeue brings worker wi's place in the step queue up to date with its engine (after a Submit or Step).
func (r *run) requeue(wi int) {
	sw := r.workers[wi]
	t, ok := sw.eng.NextEventTime()
	switch {
	case !ok && sw.qpos >= 0:
		heap.Remove(&r.steps, sw.qpos)
	case ok && sw.qpos >= 0:
		sw.nextMs = t
		heap.Fix(&r.steps, sw.qpos)
	case ok:
		sw.nextMs = t
		heap.Push(&r.steps, wi)
	}
}

// delivery is something that reaches the router at a virtual time: a step's first tokens and
// finished requests (at the step's end), or its KV events (at the end plus the event delay).
type delivery struct {
	t        float64
	seq      uint64
	worker   int
	first    []int32
	finished []int32
	events   []statestore.Event
}

type deliveries []*delivery

func (h deliveries) Len() int { return len(h) }
func (h deliveries) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h deliveries) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *deliveries) Push(x any)   { *h = append(*h, x.(*delivery)) }
func (h *deliveries) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return d
}

// run is one policy's simulation.
type run struct {
	ctx    context.Context
	cfg    Config
	w      *Workload
	policy string

	now     float64
	workers []*simWorker
	steps   stepQueue // workers with work, by next step time
	pending deliveries
	seq     uint64
	rng     *rand.Rand
	rr      int

	store  statestore.Store
	router *core.Router
	hashes []core.Hash // scratch for RouteInput.LocalHashes
	ttft   *ttftState  // ttft-sim only
	track  *ttftTrack  // ttft, ttft-predict: the store's predictions against the measured TTFT

	// per request
	routedTo  []int32
	cachedTok []int32
	firstMs   []float64
	finishMs  []float64

	decisionNs  []int64
	prefillTok  int64
	preemptions int64
	stored      int64
	evicted     int64
	rejected    int
	events      int64 // arrivals, steps and deliveries processed
	checkErr    error
}

func newRun(ctx context.Context, cfg Config, w *Workload, policy string) (*run, error) {
	n := len(w.Reqs)
	r := &run{ctx: ctx, cfg: cfg, w: w, policy: policy,
		rng:      rand.New(rand.NewPCG(cfg.Seed, policySalt(policy))),
		routedTo: make([]int32, n), cachedTok: make([]int32, n),
		firstMs: make([]float64, n), finishMs: make([]float64, n), decisionNs: make([]int64, 0, n)}
	for i := range r.firstMs {
		r.firstMs[i], r.finishMs[i], r.routedTo[i] = math.NaN(), math.NaN(), -1
	}
	for i := range cfg.Workers {
		eo := cfg.Engine
		eo.Salt = uint64(i) + 1
		eng, err := engine.New(eo)
		if err != nil {
			return nil, err
		}
		sw := &simWorker{id: workerID(i, cfg.Workers), eng: eng, qpos: -1}
		if cfg.CheckEvents {
			sw.stored = map[uint64]struct{}{}
		}
		r.workers = append(r.workers, sw)
	}
	r.steps.ws = r.workers
	if !usesCore(policy) {
		return r, nil
	}
	if policy == PolicyTTFTSim || policy == PolicyTTFTSimPredict {
		r.ttft = newTTFTState(cfg, n, policy)
	}
	st, err := cfg.NewStore()
	if err != nil {
		return nil, err
	}
	r.store = st
	r.router = core.New(st, core.Options{
		Now:    func() int64 { return int64(math.Floor(r.now)) },
		Random: r.rng.Float64,
	})
	pc := cfg.Pool
	pc.PredictedTTLMs = 0
	switch policy {
	case PolicyKVPredict, PolicyTTFTPredict:
		pc.PredictedTTLMs = cfg.Pool.PredictedTTLMs
		if pc.PredictedTTLMs == 0 {
			pc.PredictedTTLMs = DefaultPredictedTTLMs
		}
	case PolicyKVApprox:
		pc.KVEvents = false
	default:
		pc.KVEvents = true
	}
	if policy == PolicyTTFT || policy == PolicyTTFTPredict {
		start := ttftStart(cfg)
		pc.CostModel, pc.TTFTPrefillRate, pc.TTFTDecodeCoeff = statestore.CostModelTTFT, start.PrefillRate, start.DecodeCoeff
		r.track = newTTFTTrack(n, cfg.Workers)
	}
	if err := r.router.PutPool(ctx, poolName, pc); err != nil {
		return nil, err
	}
	for _, sw := range r.workers {
		spec := statestore.WorkerSpec{WorkerID: sw.id, URL: "sim://" + sw.id,
			TotalKVBlocks: int64(cfg.Engine.NumBlocks), MaxNumBatchedTokens: int64(cfg.Engine.MaxNumBatchedTokens)}
		if err := r.router.PutWorker(ctx, poolName, spec, 0); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// policySalt gives each policy its own random stream under one seed; the store-backed ttft policies
// share their simulator-side references' (ttft-sim, ttft-sim-predict) so that the two decide alike,
// tie-breaks included (TestTTFTPolicyMatchesTTFTSim).
func policySalt(p string) uint64 {
	switch p {
	case PolicyTTFT:
		p = PolicyTTFTSim
	case PolicyTTFTPredict:
		p = PolicyTTFTSimPredict
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(p); i++ {
		h = (h ^ uint64(p[i])) * 1099511628211
	}
	return h
}

// workerID names worker i so that byte order is index order ("w00", "w01", …).
func workerID(i, n int) string {
	return fmt.Sprintf("w%0*d", len(strconv.Itoa(max(n-1, 1))), i)
}

func requestID(i int) string { return "r" + strconv.Itoa(i) }

// simulate runs the discrete-event loop to the end of the workload.
func (r *run) simulate() error {
	if r.store != nil {
		defer r.store.Close()
	}
	if r.track != nil { // the store's final calibration, read before the store closes (Redis)
		defer func() { r.track.final, _ = r.router.Workers(r.ctx, poolName) }()
	}
	n := len(r.w.Reqs)
	next := 0
	inf := math.Inf(1)
	for {
		tA := inf
		if next < n {
			tA = r.w.ArrivalMs[next]
		}
		tD := inf
		if len(r.pending) > 0 {
			tD = r.pending[0].t
		}
		tS, ws := inf, -1
		if len(r.steps.ix) > 0 {
			ws = r.steps.ix[0]
			tS = r.workers[ws].nextMs
		}
		r.events++
		switch {
		case tD == inf && tA == inf && tS == inf:
			r.events--
			return r.finish()
		case tD <= tA && tD <= tS:
			r.now = tD
			if err := r.deliver(heap.Pop(&r.pending).(*delivery)); err != nil {
				return err
			}
		case tA <= tS:
			r.now = tA
			if err := r.arrive(next); err != nil {
				return err
			}
			next++
			if next%256 == 0 {
				if err := r.ctx.Err(); err != nil {
					return err
				}
				if r.cfg.Progress != nil {
					r.cfg.Progress(r.policy, next)
				}
			}
		default:
			r.now = tS
			err := r.step(ws, tS)
			r.requeue(ws)
			if err != nil {
				return err
			}
		}
	}
}

// arrive routes request i and submits it to the chosen engine.
func (r *run) arrive(i int) error {
	req := &r.w.Reqs[i]
	t0 := time.Now()
	wi, err := r.route(i)
	r.decisionNs = append(r.decisionNs, time.Since(t0).Nanoseconds())
	if err != nil {
		return fmt.Errorf("%s: route request %d: %w", r.policy, i, err)
	}
	r.routedTo[i] = int32(wi)
	sw := r.workers[wi]
	err = sw.eng.Submit(engine.Request{ID: uint64(i), InputTokens: req.InputTokens, OutputTokens: req.OutputTokens,
		SeqHashes: r.w.Seq[i], LocalHashes: r.w.Local[i]}, r.now)
	r.requeue(wi)
	if errors.Is(err, engine.ErrTooLong) {
		r.rejected++
		if r.ttft != nil {
			r.ttftDone(i)
			return nil
		}
		if r.router != nil {
			_, err = r.router.Done(r.ctx, poolName, requestID(i))
		}
		return err
	}
	if err != nil {
		return err
	}
	sw.active++
	return nil
}

// route picks request i's worker by the run's policy.
func (r *run) route(i int) (int, error) {
	switch r.policy {
	case PolicyRoundRobin:
		w := r.rr % len(r.workers)
		r.rr++
		return w, nil
	case PolicyRandom:
		return r.rng.IntN(len(r.workers)), nil
	case PolicyLeastLoaded:
		best, ties := -1, 0
		for wi, sw := range r.workers {
			switch {
			case best < 0 || sw.active < r.workers[best].active:
				best, ties = wi, 1
			case sw.active == r.workers[best].active:
				ties++
				if r.rng.IntN(ties) == 0 { // reservoir: a uniform pick among the ties
					best = wi
				}
			}
		}
		return best, nil
	case PolicyTTFTSim, PolicyTTFTSimPredict:
		return r.routeTTFT(i)
	}
	local := r.w.Local[i]
	r.hashes = r.hashes[:0]
	for _, h := range local {
		r.hashes = append(r.hashes, core.Hash(h))
	}
	isl := int64(r.w.Reqs[i].InputTokens)
	d, err := r.router.Route(r.ctx, core.RouteInput{Pool: poolName, RequestID: requestID(i), LocalHashes: r.hashes, ISL: &isl})
	if err != nil {
		return 0, err
	}
	wi, err := r.workerIndex(d.WorkerID)
	if err == nil && r.track != nil {
		r.track.routed(i, wi, d.Cost)
	}
	return wi, err
}

func (r *run) workerIndex(id string) (int, error) {
	if len(id) > 1 {
		if i, err := strconv.Atoi(id[1:]); err == nil && i >= 0 && i < len(r.workers) && r.workers[i].id == id {
			return i, nil
		}
	}
	return 0, fmt.Errorf("router chose unknown worker %q", id)
}

// step runs worker wi's next scheduler step and schedules what it produces.
func (r *run) step(wi int, t float64) error {
	sw := r.workers[wi]
	res := sw.eng.Step(t)
	sw.busyMs += res.EndMs - res.StartMs
	r.prefillTok += int64(res.PrefillTokens)
	r.preemptions += int64(len(res.Preempted))
	for _, a := range res.Admitted {
		if !a.Resumed {
			r.cachedTok[a.ID] = int32(a.CachedTokens)
		}
	}
	if len(res.FirstTokens)+len(res.Finished) > 0 {
		d := &delivery{t: res.EndMs, worker: wi}
		for _, f := range res.FirstTokens {
			r.firstMs[f.ID] = f.TimeMs
			d.first = append(d.first, int32(f.ID))
		}
		for _, f := range res.Finished {
			r.finishMs[f.ID] = f.TimeMs
			d.finished = append(d.finished, int32(f.ID))
		}
		r.push(d)
	}
	if len(res.Events) == 0 {
		return nil
	}
	evs := r.convert(sw, res.Events)
	switch r.policy {
	case PolicyKVInstant: // the true cache state, at once
		return r.applyEvents(wi, evs, t)
	case PolicyKV, PolicyKVPredict, PolicyTTFTSim, PolicyTTFTSimPredict, PolicyTTFT, PolicyTTFTPredict:
		r.push(&delivery{t: res.EndMs + r.cfg.EventDelayMs, worker: wi, events: evs})
	}
	return nil
}

func (r *run) push(d *delivery) {
	d.seq = r.seq
	r.seq++
	heap.Push(&r.pending, d)
}

// convert turns a step's engine events into store events with per-worker event ids, counting blocks
// and (CheckEvents) tracking every stored block until it is removed.
func (r *run) convert(sw *simWorker, evs []engine.Event) []statestore.Event {
	out := make([]statestore.Event, 0, len(evs))
	for _, e := range evs {
		sw.eventID++
		se := EngineEvent(e)
		se.EventID, se.HasEventID = sw.eventID, true
		switch e.Kind {
		case engine.EventStored:
			r.stored += int64(len(e.Blocks))
			if sw.stored != nil {
				for _, b := range e.Blocks {
					if _, dup := sw.stored[b.EngineHash]; dup && r.checkErr == nil {
						r.checkErr = fmt.Errorf("worker %s: block %d stored twice", sw.id, b.EngineHash)
					}
					sw.stored[b.EngineHash] = struct{}{}
				}
			}
		case engine.EventRemoved:
			r.evicted += int64(len(e.EngineHashes))
			if sw.stored != nil {
				for _, h := range e.EngineHashes {
					if _, ok := sw.stored[h]; !ok && r.checkErr == nil {
						r.checkErr = fmt.Errorf("worker %s: block %d removed but never stored", sw.id, h)
					}
					delete(sw.stored, h)
				}
			}
		}
		out = append(out, se)
	}
	return out
}

// EngineEvent converts an engine KV event into the state store's form (no event id).
func EngineEvent(e engine.Event) statestore.Event {
	var se statestore.Event
	switch e.Kind {
	case engine.EventStored:
		se.Kind, se.Parent, se.HasParent = statestore.EventStored, e.ParentEngineHash, e.HasParent
		se.Blocks = make([]statestore.StoredBlock, len(e.Blocks))
		for i, b := range e.Blocks {
			se.Blocks[i] = statestore.StoredBlock{EngineHash: b.EngineHash, LocalHash: b.LocalHash}
		}
	case engine.EventRemoved:
		se.Kind, se.Removed = statestore.EventRemoved, e.EngineHashes
	}
	return se
}

func (r *run) applyEvents(wi int, evs []statestore.Event, t float64) error {
	res, err := r.router.Store().ApplyEvents(r.ctx, statestore.EventBatch{Pool: poolName, WorkerID: r.workers[wi].id,
		Events: evs, NowMs: int64(math.Floor(t))})
	if err != nil {
		return fmt.Errorf("%s: apply events of %s: %w", r.policy, r.workers[wi].id, err)
	}
	if res.ParentNotFound+res.BlockNotFound+res.Stale+res.Gaps+res.UnknownWorker > 0 && r.checkErr == nil {
		r.checkErr = fmt.Errorf("worker %s: events not applied cleanly: %+v", r.workers[wi].id, res)
	}
	return nil
}

// deliver hands a step's outputs or events to the router.
func (r *run) deliver(d *delivery) error {
	if d.events != nil {
		return r.applyEvents(d.worker, d.events, d.t)
	}
	sw := r.workers[d.worker]
	for _, id := range d.first {
		if r.ttft != nil {
			r.ttftFirstToken(int(id), d.t)
			continue
		}
		if r.router != nil {
			if r.track != nil {
				r.track.firstToken(int(id), r.w.ArrivalMs[id], d.t, r.cfg.TTFTWarmup)
			}
			if _, err := r.router.PrefillDone(r.ctx, poolName, requestID(int(id))); err != nil {
				return err
			}
		}
	}
	for _, id := range d.finished {
		sw.active--
		if r.ttft != nil {
			r.ttftDone(int(id))
			continue
		}
		if r.router != nil {
			if _, err := r.router.Done(r.ctx, poolName, requestID(int(id))); err != nil {
				return err
			}
		}
	}
	return nil
}

// finish runs the end-of-simulation checks.
func (r *run) finish() error {
	if !r.cfg.CheckEvents || r.checkErr != nil {
		return nil
	}
	for _, sw := range r.workers {
		pool := sw.eng.Pool()
		res := pool.Resident()
		if len(res) != len(sw.stored) {
			r.checkErr = fmt.Errorf("worker %s: %d blocks stored and not removed, %d resident", sw.id, len(sw.stored), len(res))
			return nil
		}
		for _, seq := range res {
			if _, ok := sw.stored[pool.EngineHash(seq)]; !ok {
				r.checkErr = fmt.Errorf("worker %s: resident block %d was never stored", sw.id, seq)
				return nil
			}
		}
	}
	return nil
}
