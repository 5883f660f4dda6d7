package sim

import (
	"math"
	"slices"

	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/statestore"
)

// The ttft-sim policy: SPEC §6.6's cost model decided in the simulator, before the stores implement
// `cost_model: ttft`. It reads the overlap from the router's index (fed KV events like kv) and keeps
// the load the stores will book (SPEC §6.1) itself, per worker: active_prefill_tokens (uncached tokens
// of routed requests, released at their first token) and active_decode_blocks (required blocks of
// every active request, released when it ends). It picks the minimum predicted TTFT (ties: the seeded
// random number, SPEC §6.3) and calibrates each worker's coefficients with statestore.TTFTCalibration at the
// request's real first token, exactly as a store will on prefill_done.
//
// ttft-sim-predict adds predict-on-route (SPEC §6.3's predicted entries, predicted_ttl_ms as
// kv-predict: Pool.PredictedTTLMs or DefaultPredictedTTLMs): routing a prompt to a worker marks its
// blocks there for the TTL (sliding), and a candidate's overlap is the deeper of the index's and the
// predicted one; the extra blocks count as cached in the booking too. Fan-out siblings then see the
// first sibling's prefill as theirs and wait for it instead of recomputing it elsewhere.

// ttftWorker is one worker's booked load and calibration.
type ttftWorker struct {
	prefillTokens int64 // active_prefill_tokens
	decodeBlocks  int64 // active_decode_blocks
	cal           statestore.TTFTState
	predicted     map[uint64]float64 // ttft-sim-predict: sequence hash → expiry, ms
	pruneAt       int                // sweep expired entries when predicted grows past this
}

// ttftLease is what a request booked and what its prediction used (the stores' lease fields).
type ttftLease struct {
	worker        int
	uncached      int64 // booked prefill tokens, released at the first token
	required      int64 // booked decode blocks, released at the end
	prefillTokens int64 // feature x1: active_prefill_tokens + uncached at decision time
	decodeBlocks  int64 // feature x2: active_decode_blocks at decision time
	predictedS    float64
	sample        int // how many samples the worker's calibration had taken at decision time
	released      bool
}

// ttftState is the policy's state for one run.
type ttftState struct {
	cal     statestore.TTFTCalibration
	pool    statestore.TTFTState // the fleet's calibration, inherited by workers without samples
	workers []ttftWorker
	leases  []ttftLease // by request index
	scratch []int64     // overlap blocks by worker
	// predictMs is the predicted entries' TTL, ms (0 = ttft-sim: none).
	predictMs float64
	// errors of predictions made after a worker took Config.TTFTWarmup samples: |pred/meas − 1|
	relErr          []float64
	sumPred, sumMea float64
}

// DefaultTTFTCoeffs are the pool-default coefficients the ttft-sim policy starts from when
// Config.TTFTStart is zero, derived from the engine model: prefill_rate = PrefillCapacity (full
// chunks), decode_coeff = the attention cost of one block's context in one step (BlockSize ×
// ContextMsPerToken).
func DefaultTTFTCoeffs(eng engine.Options) statestore.TTFTCoeffs {
	return statestore.TTFTCoeffs{PrefillRate: PrefillCapacity(eng) * 1000, DecodeCoeff: float64(eng.BlockSize) * eng.ContextMsPerToken / 1000}
}

func newTTFTState(cfg Config, n int, policy string) *ttftState {
	ref := DefaultTTFTCoeffs(cfg.Engine)
	st := &ttftState{cal: statestore.TTFTCalibration{Ref: ref}.WithDefaults(), workers: make([]ttftWorker, cfg.Workers),
		leases: make([]ttftLease, n), scratch: make([]int64, cfg.Workers)}
	if policy == PolicyTTFTSimPredict {
		st.predictMs = float64(cfg.Pool.PredictedTTLMs)
		if st.predictMs == 0 {
			st.predictMs = DefaultPredictedTTLMs
		}
	}
	st.pool = st.cal.Init(ttftStart(cfg))
	for i := range st.workers {
		st.workers[i].cal = st.pool
	}
	return st
}

// ttftStart is Config.TTFTStart with zero fields from DefaultTTFTCoeffs.
func ttftStart(cfg Config) statestore.TTFTCoeffs {
	ref, start := DefaultTTFTCoeffs(cfg.Engine), cfg.TTFTStart
	if start.PrefillRate == 0 {
		start.PrefillRate = ref.PrefillRate
	}
	if start.DecodeCoeff == 0 {
		start.DecodeCoeff = ref.DecodeCoeff
	}
	return start
}

// routeTTFT picks request i's worker by predicted TTFT and books its load.
func (r *run) routeTTFT(i int) (int, error) {
	st := r.ttft
	clear(st.scratch)
	scores, err := r.router.Store().Overlap(r.ctx, poolName, r.w.Seq[i], int64(math.Floor(r.now)))
	if err != nil {
		return 0, err
	}
	for _, sc := range scores {
		wi, err := r.workerIndex(sc.WorkerID)
		if err != nil {
			return 0, err
		}
		st.scratch[wi] = max(st.scratch[wi], int64(sc.Blocks))
	}
	seq := r.w.Seq[i]
	if st.predictMs > 0 {
		for wi := range st.workers {
			st.scratch[wi] = max(st.scratch[wi], st.workers[wi].predictedDepth(seq, r.now))
		}
	}
	isl := int64(r.w.Reqs[i].InputTokens)
	bs := int64(r.w.EngineBlock)
	best, ties := math.Inf(1), 0
	var cands [64]int
	tied := cands[:0]
	for wi := range st.workers {
		w := &st.workers[wi]
		uncached := max(isl-st.scratch[wi]*bs, 0)
		c := statestore.PredictTTFT(statestore.EffectiveTTFT(w.cal, st.pool), w.prefillTokens, uncached, w.decodeBlocks).Cost()
		switch {
		case c < best:
			best, ties, tied = c, 1, append(tied[:0], wi)
		case c == best:
			ties++
			tied = append(tied, wi)
		}
	}
	wi := tied[int(r.rng.Float64()*float64(ties))]
	w := &st.workers[wi]
	uncached := max(isl-st.scratch[wi]*bs, 0)
	l := ttftLease{worker: wi, uncached: uncached, required: (isl + bs - 1) / bs,
		prefillTokens: w.prefillTokens + uncached, decodeBlocks: w.decodeBlocks, sample: int(w.cal.Samples),
		predictedS: statestore.PredictTTFT(statestore.EffectiveTTFT(w.cal, st.pool), w.prefillTokens, uncached, w.decodeBlocks).Cost()}
	if st.predictMs > 0 {
		w.predict(seq, r.now, st.predictMs)
	}
	w.prefillTokens += l.uncached
	w.decodeBlocks += l.required
	st.leases[i] = l
	return wi, nil
}

// predictedDepth is how many leading blocks of seq have a live predicted entry on the worker.
func (w *ttftWorker) predictedDepth(seq []uint64, nowMs float64) int64 {
	d := 0
	for d < len(seq) {
		if exp, ok := w.predicted[seq[d]]; !ok || nowMs >= exp {
			break
		}
		d++
	}
	return int64(d)
}

// predict writes (or slides) predicted entries for every block of seq, live while now < t + ttl.
func (w *ttftWorker) predict(seq []uint64, nowMs, ttlMs float64) {
	if w.predicted == nil {
		w.predicted, w.pruneAt = map[uint64]float64{}, 4096
	}
	for _, h := range seq {
		w.predicted[h] = nowMs + ttlMs
	}
	if len(w.predicted) > w.pruneAt { // amortised: memory bounded by the live entries
		for h, exp := range w.predicted {
			if nowMs >= exp {
				delete(w.predicted, h)
			}
		}
		w.pruneAt = max(4096, 2*len(w.predicted))
	}
}

// ttftFirstToken is prefill_done: release the prefill booking and calibrate on the measured TTFT.
func (r *run) ttftFirstToken(i int, atMs float64) {
	st := r.ttft
	l := &st.leases[i]
	w := &st.workers[l.worker]
	if l.released {
		return
	}
	w.prefillTokens -= l.uncached
	l.released = true
	measured := (atMs - r.w.ArrivalMs[i]) / 1000
	if l.sample >= r.cfg.TTFTWarmup && measured > 0 {
		st.relErr = append(st.relErr, math.Abs(l.predictedS/measured-1))
		st.sumPred += l.predictedS
		st.sumMea += measured
	}
	// Calibrated on the store's clock (whole milliseconds, router.Now), as the store does at prefill_done.
	w.cal, st.pool, _ = st.cal.Observe(w.cal, st.pool, statestore.TTFTObservation{PrefillTokens: float64(l.prefillTokens),
		DecodeBlocks: float64(l.decodeBlocks), MeasuredS: float64(int64(math.Floor(atMs))-int64(math.Floor(r.w.ArrivalMs[i]))) / 1000})
}

// ttftDone ends request i (finished or rejected): release whatever it still holds.
func (r *run) ttftDone(i int) {
	st := r.ttft
	l := &st.leases[i]
	w := &st.workers[l.worker]
	if !l.released {
		w.prefillTokens -= l.uncached
		l.released = true
	}
	w.decodeBlocks -= l.required
	l.required = 0
}

// TTFTModel reports how well ttft-sim's calibrated model predicted TTFT.
type TTFTModel struct {
	// Warmup is the number of samples a worker had taken before its predictions count here.
	Warmup int `json:"warmup"`
	// Predictions counted (requests routed to a worker that had taken at least Warmup samples).
	Predictions int `json:"predictions"`
	// MedianRelErr and P90RelErr are quantiles of |predicted / measured − 1| over those predictions.
	MedianRelErr float64 `json:"median_rel_err"`
	P90RelErr    float64 `json:"p90_rel_err"`
	// SumRatio is Σ predicted / Σ measured over them (1 = unbiased on aggregate).
	SumRatio float64 `json:"sum_ratio"`
	// Workers are the final coefficients, by worker (the pool's for a worker that took no sample);
	// Samples how many first tokens calibrated each; Pool the fleet-wide fit.
	Workers []statestore.TTFTCoeffs `json:"workers"`
	Samples []int                   `json:"samples"`
	Pool    statestore.TTFTCoeffs   `json:"pool"`
}

func (st *ttftState) model(warmup int) *TTFTModel {
	m := &TTFTModel{Warmup: warmup, Predictions: len(st.relErr)}
	if len(st.relErr) > 0 {
		e := slices.Clone(st.relErr)
		slices.Sort(e)
		m.MedianRelErr, m.P90RelErr = quantile(e, 0.5), quantile(e, 0.9)
		m.SumRatio = st.sumPred / st.sumMea
	}
	for _, w := range st.workers {
		m.Workers = append(m.Workers, statestore.EffectiveTTFT(w.cal, st.pool))
		m.Samples = append(m.Samples, int(w.cal.Samples))
	}
	m.Pool = st.pool.TTFTCoeffs
	return m
}

// ttftTrack measures the store-backed ttft policies' predictions: a decision's cost is its predicted TTFT,
// s (the chosen rank's coefficients, calibrated by the store at prefill_done). A worker's samples are
// counted here as the first tokens the store could calibrate on (a measured time of at least 1 ms on the
// store's millisecond clock); the store skips the rare sample with no feature at all, so this may count
// one or two more than the store took.
type ttftTrack struct {
	worker          []int32   // by request: the chosen worker
	predictedS      []float64 // by request: the decision's cost
	sample          []int     // by request: the worker's samples at decision time
	samples         []int     // by worker
	relErr          []float64 // |pred/meas − 1| of predictions made after the warm-up
	sumPred, sumMea float64
	final           []statestore.WorkerInfo // the store's workers listing at the end of the run (nil: unread)
}

func newTTFTTrack(n, workers int) *ttftTrack {
	return &ttftTrack{worker: make([]int32, n), predictedS: make([]float64, n), sample: make([]int, n), samples: make([]int, workers)}
}

func (t *ttftTrack) routed(i, wi int, costS float64) {
	t.worker[i], t.predictedS[i], t.sample[i] = int32(wi), costS, t.samples[wi]
}

// firstToken records request i's first token at atMs (arrived, and routed, at arrivalMs).
func (t *ttftTrack) firstToken(i int, arrivalMs, atMs float64, warmup int) {
	measured := (atMs - arrivalMs) / 1000
	if t.sample[i] >= warmup && measured > 0 {
		t.relErr = append(t.relErr, math.Abs(t.predictedS[i]/measured-1))
		t.sumPred += t.predictedS[i]
		t.sumMea += measured
	}
	if math.Floor(atMs) > math.Floor(arrivalMs) {
		t.samples[t.worker[i]]++
	}
}

// model reports the predictions and, from the store's workers listing, the final coefficients (rank 0's
// own fit; a worker without one shows zero coefficients: the store keeps the pool's fit to itself).
func (t *ttftTrack) model(warmup int, ws []statestore.WorkerInfo) *TTFTModel {
	m := &TTFTModel{Warmup: warmup, Predictions: len(t.relErr), Samples: t.samples}
	if len(t.relErr) > 0 {
		e := slices.Clone(t.relErr)
		slices.Sort(e)
		m.MedianRelErr, m.P90RelErr = quantile(e, 0.5), quantile(e, 0.9)
		m.SumRatio = t.sumPred / t.sumMea
	}
	m.Workers = make([]statestore.TTFTCoeffs, len(t.samples))
	for wi, w := range ws {
		if wi < len(m.Workers) && len(w.Ranks) > 0 && w.Ranks[0].TTFT != nil {
			m.Workers[wi] = w.Ranks[0].TTFT.TTFTCoeffs
		}
	}
	return m
}
