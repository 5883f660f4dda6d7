package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// DefaultSharing is how many workers hold each indexed chain by default. In a fleet a prefix worth
// indexing (a system prompt, a shared document, an agent's tool preamble) is requested by many users,
// and a load-aware router spreads those requests, so the prefix ends up cached on several workers;
// with one holder per chain a decision would see a single overlapping candidate, which flatters the
// per-candidate work. 4 is a middle value for 16–64-worker pools (a quarter of a 16-worker pool).
const DefaultSharing = 4

// RouteOptions configure RunRoute. Every list gives one run per combination.
type RouteOptions struct {
	// Workers per pool (one index per count) and PromptBlocks per decision (one index per length:
	// chains of max(PromptBlocks, 64) blocks; a prompt is a chain's first PromptBlocks, diverging at a
	// random block half the time).
	Workers, PromptBlocks []int
	// Blocks is the number of indexed (block, worker) entries.
	Blocks int
	// Sharing is how many workers hold each chain (capped at the worker count). Default DefaultSharing.
	Sharing int
	// Clients: concurrent clients of the closed-loop runs, one run per count.
	Clients []int
	// Senders is the most calls in flight of an open-loop run (at least its clients): enough that
	// the fixed rate holds through a stall instead of turning the run into a closed loop. Default 64.
	Senders int
	// SpinTail: against a store on a server (Redis; an embedded store gets none, see DefaultSpinTail), an
	// open-loop sender sleeps until this long before its call's scheduled time and spins
	// the rest (spinTailClock), so the generator's own wake-up is not counted as the store's latency.
	// 0 = sleep only (the send lag then holds the wake-up). The command's default: DefaultSpinTail.
	SpinTail time.Duration
	// Duration of each run, unless Routes > 0: then each run makes Routes·clients decisions.
	Duration time.Duration
	Routes   int
	// Rate, when > 0, adds an open-loop run at that many decisions/s after each closed-loop run;
	// RateHalf adds one at half the closed-loop run's decisions/s instead.
	Rate     float64
	RateHalf bool
	// Settle is the pause before each open-loop run, after its closed-loop run (DefaultSettle says why);
	// 0 = none. The command's default: DefaultSettle.
	Settle time.Duration
	// NoDone skips the `done` after each decision (loads then grow through the run).
	NoDone bool
	// NewReleaser, when set, gives each run the way its decisions' dones travel (a Releaser: the router's
	// release coalescing, `--release-delay`); nil = each done is its own store call right after the
	// decision. ReleaseDelayMs is reported with the results.
	NewReleaser    func(statestore.Store) Releaser
	ReleaseDelayMs float64
	// Repeat is the runs per combination (median, min, max are reported). Default 3.
	Repeat int
	// Calibrate is the decisions, then `done` calls, of the calibration phase before each closed-loop
	// run on a server store (Redis CPU of a decision alone and of a done alone, at the run's
	// concurrency). Default 1000; < 0 = skip.
	Calibrate int
	// PromptPool is the number of prompts hashed before the runs (decisions draw from it, so hashing
	// is outside the timed window). Default 1024.
	PromptPool int
	// PredictedTTLMs is the pool's predicted_ttl_ms (predict-on-route books soft entries); 0 = off.
	PredictedTTLMs int64
	// Log receives a text table of the summaries (nil = none).
	Log io.Writer
	// CallsOut, when set, receives every open-loop call of every run as a tab-separated row (calls.go:
	// the run's index in the report's runs, slot, scheduled time, send lag, service, latency; µs), after
	// a header line: the tail's shape in time, which p50/p99 cannot show.
	CallsOut io.Writer
}

// Releaser carries a run's dones as a router does: a *core.ReleaseQueue over the run's store (cmd builds
// it, so this package needs nothing the stores of older builds lack — scripts/bench-compare.sh -g grafts
// it onto them).
type Releaser interface {
	// Route makes one decision on the releaser's store, carrying the releases pending in its pool.
	Route(ctx context.Context, req statestore.RouteRequest) (statestore.Decision, error)
	// Add queues a decided request's done.
	Add(pool, id string)
	// Flush sends what is still pending in pool ("" every pool): a run's end, its dones belong to its
	// measurement.
	Flush(pool string)
}

// RouteVariant is one store to time: the embedded route script, or a variant of it (Redis).
type RouteVariant struct {
	Name  string
	Store statestore.Store
}

// RouteTarget is one store under test. Open is called once per (workers, prompt) combination and
// returns the variants timed against that combination's index (they share one namespace; the first
// loads it). After the combination the stores are closed and, unless Keep, the namespace dropped.
type RouteTarget struct {
	Name string
	Open func() ([]RouteVariant, error)
	// Keep leaves the index in place, and reuses one already there (a fixed --prefix).
	Keep bool
}

// RouteRun is one run's measurements. Redis figures come from INFO deltas over the run only.
type RouteRun struct {
	Store        string  `json:"store"`
	Variant      string  `json:"variant,omitempty"`
	Workers      int     `json:"workers"`
	PromptBlocks int     `json:"prompt_blocks"`
	Clients      int     `json:"clients"`
	Mode         string  `json:"mode"` // "closed" or "open"
	Repeat       int     `json:"repeat"`
	TargetRate   float64 `json:"target_rate,omitempty"`
	// SpinTailUs is the open-loop generator's spin tail (RouteOptions.SpinTail), µs; 0: senders only slept.
	SpinTailUs float64 `json:"spin_tail_us,omitempty"`
	// SettleMs is the pause before this open-loop run (RouteOptions.Settle), ms.
	SettleMs  float64 `json:"settle_ms,omitempty"`
	Decisions int     `json:"decisions"`
	Seconds   float64 `json:"seconds"`
	// DecisionsPerS achieved; latencies in µs (open loop: from the scheduled send time).
	DecisionsPerS float64 `json:"decisions_per_s"`
	P50us         float64 `json:"p50_us"`
	P99us         float64 `json:"p99_us"`
	MaxUs         float64 `json:"max_us"`
	// LagP50us and LagP99us (open loop) are the send lag: how late calls started after their
	// scheduled time (the generator's timers and preemption, and senders all busy); part of the latency.
	LagP50us float64 `json:"send_lag_p50_us,omitempty"`
	LagP99us float64 `json:"send_lag_p99_us,omitempty"`
	// ServiceP50us and ServiceP99us (open loop) are end − actual start: the latency without the lag.
	ServiceP50us float64 `json:"service_p50_us,omitempty"`
	ServiceP99us float64 `json:"service_p99_us,omitempty"`
	// ClientCPUus is the benchmark process's CPU (user + kernel, every thread) over the run per decision:
	// the client side of a decision (request building, the Redis client, the Go runtime and collector, the
	// generator), the open-loop spin tail included; ClientSpinUs is that spinning's part. Their ratio to
	// the run's time says how busy the generator's CPU was, i.e. whether the tail could be its own.
	ClientCPUus  float64 `json:"client_cpu_us_per_decision,omitempty"`
	ClientSpinUs float64 `json:"client_spin_us_per_decision,omitempty"`
	// ClientBusy is the client's CPU over the run's time on the CPUs it may use (GOMAXPROCS), 0–1: near 1
	// the generator queues its own calls and the latency is partly its own.
	ClientBusy float64 `json:"client_busy,omitempty"`
	// RedisCPUus is Redis CPU (used_cpu_user+sys delta, all nodes) over the run per decision, its
	// `done` included; ExclDone subtracts this repeat's calibrated CPU per done.
	RedisCPUus         float64 `json:"redis_cpu_us_per_decision,omitempty"`
	RedisCPUusExclDone float64 `json:"redis_cpu_us_per_decision_excl_done,omitempty"`
	// RedisCPUSysUs is the kernel's part of RedisCPUus (used_cpu_sys): per-request socket and event-loop
	// cost, which grows when calls arrive one at a time (open loop) instead of batched.
	RedisCPUSysUs float64 `json:"redis_cpu_sys_us_per_decision,omitempty"`
	// DecisionsPerCoreS is 1e6 / RedisCPUus: decisions (with their done) per Redis core-second.
	DecisionsPerCoreS float64 `json:"decisions_per_redis_core_s,omitempty"`
	// CommandUs and Calls: INFO commandstats deltas (all commands) per decision; command time omits
	// parsing and replies, so it is a secondary figure.
	CommandUs float64                    `json:"command_us_per_decision,omitempty"`
	Calls     float64                    `json:"redis_calls_per_decision,omitempty"`
	Slowlog   *statestore.SlowlogSummary `json:"slowlog,omitempty"`
	// SlowClientCalls are the calls (route or done) this client saw take ≥ SlowClientUs, network
	// included, with when they started (µs precision, unlike SLOWLOG's seconds), at most
	// MaxSlowClientCalls: what scripts/bench-tail.sh sets beside its stall probe.
	SlowClientCalls []ClientCall `json:"slow_client_calls,omitempty"`
	LoadBefore      LoadAvg      `json:"loadavg_before"`
	LoadAfter       LoadAvg      `json:"loadavg_after"`
}

// SlowClientUs is the client-side time from which a call is listed in RouteRun.SlowClientCalls, µs:
// SPEC §8's 1 ms per call.
const SlowClientUs = 1000

// MaxSlowClientCalls bounds RouteRun.SlowClientCalls.
const MaxSlowClientCalls = 2048

// ClientCall is one call as the benchmark's client timed it.
type ClientCall struct {
	Op          string  `json:"op"` // "route" or "done"
	StartUnixUs int64   `json:"start_unix_us"`
	Us          float64 `json:"us"`
}

// RouteCalibration is one repeat's calibration on a server store for one client count: Calls
// decisions without done, then their Calls done calls, from Clients concurrent clients; each phase's
// Redis CPU per call. RedisCPUusExclDone of the runs subtracts DoneCPUus.
type RouteCalibration struct {
	Store         string  `json:"store"`
	Variant       string  `json:"variant,omitempty"`
	Workers       int     `json:"workers"`
	PromptBlocks  int     `json:"prompt_blocks"`
	Repeat        int     `json:"repeat"`
	Clients       int     `json:"clients"`
	Calls         int     `json:"calls"`
	RouteCPUus    float64 `json:"route_only_redis_cpu_us"`
	DoneCPUus     float64 `json:"done_only_redis_cpu_us"`
	RouteCommandU float64 `json:"route_only_command_us"`
	DoneCommandUs float64 `json:"done_only_command_us"`
}

// RouteIndex is one loaded index.
type RouteIndex struct {
	Store        string  `json:"store"`
	Pool         string  `json:"pool"`
	Workers      int     `json:"workers"`
	PromptBlocks int     `json:"prompt_blocks"`
	Sharing      int     `json:"sharing"`
	Reused       bool    `json:"reused,omitempty"`
	LoadSeconds  float64 `json:"load_seconds"`
	// ClientPrepUs is the client work per prompt done before the runs (sequence hashes), µs.
	ClientPrepUs float64 `json:"client_prep_us_per_prompt"`
}

// RouteSummary is median/min/max over the repeats of one (store, variant, workers, prompt, clients,
// mode) combination.
type RouteSummary struct {
	Store              string  `json:"store"`
	Variant            string  `json:"variant,omitempty"`
	Workers            int     `json:"workers"`
	PromptBlocks       int     `json:"prompt_blocks"`
	Clients            int     `json:"clients"`
	Mode               string  `json:"mode"`
	Runs               int     `json:"runs"`
	TargetRate         Summary `json:"target_rate"`
	DecisionsPerS      Summary `json:"decisions_per_s"`
	P50us              Summary `json:"p50_us"`
	P99us              Summary `json:"p99_us"`
	MaxUs              Summary `json:"max_us"`
	LagP50us           Summary `json:"send_lag_p50_us"`
	LagP99us           Summary `json:"send_lag_p99_us"`
	ServiceP50us       Summary `json:"service_p50_us"`
	ServiceP99us       Summary `json:"service_p99_us"`
	ClientCPUus        Summary `json:"client_cpu_us_per_decision"`
	ClientSpinUs       Summary `json:"client_spin_us_per_decision"`
	ClientBusy         Summary `json:"client_busy"`
	RedisCPUus         Summary `json:"redis_cpu_us_per_decision"`
	RedisCPUusExclDone Summary `json:"redis_cpu_us_per_decision_excl_done"`
	RedisCPUSysUs      Summary `json:"redis_cpu_sys_us_per_decision"`
	DecisionsPerCoreS  Summary `json:"decisions_per_redis_core_s"`
	CommandUs          Summary `json:"command_us_per_decision"`
	// SlowCalls sums the namespace's SLOWLOG entries over the repeats; SlowMaxUs is the longest.
	SlowCalls int `json:"slowlog_calls"`
	// SlowAll sums every entry the server logged during the runs, any client, counted from entry ids
	// (exact even where the retained log was truncated).
	SlowAll   int64   `json:"slowlog_calls_all_clients"`
	SlowMaxUs int64   `json:"slowlog_max_us"`
	Load      Summary `json:"loadavg_1m"`
}

// RouteReport is what `kvrouter bench route` prints.
type RouteReport struct {
	Bench          string             `json:"bench"`
	Stores         []string           `json:"stores"`
	IndexedBlocks  int                `json:"indexed_blocks"`
	Sharing        int                `json:"sharing"`
	Done           bool               `json:"done_after_each_decision"`
	ReleaseDelayMs float64            `json:"release_delay_ms,omitempty"`
	Repeat         int                `json:"repeat"`
	PredictedTTLMs int64              `json:"predicted_ttl_ms"`
	Indexes        []RouteIndex       `json:"indexes"`
	Calibrations   []RouteCalibration `json:"calibrations,omitempty"`
	Runs           []RouteRun         `json:"runs"`
	Summaries      []RouteSummary     `json:"summaries"`
}

func (o *RouteOptions) defaults() error {
	if o.Sharing == 0 {
		o.Sharing = DefaultSharing
	}
	if o.Repeat == 0 {
		o.Repeat = 3
	}
	if o.Calibrate == 0 {
		o.Calibrate = 1000
	}
	if o.Senders == 0 {
		o.Senders = 64
	}
	if o.PromptPool == 0 {
		o.PromptPool = 1024
	}
	if len(o.Workers) == 0 || len(o.PromptBlocks) == 0 || len(o.Clients) == 0 || o.Blocks <= 0 || o.Sharing < 0 ||
		o.Repeat < 0 || o.PromptPool < 0 || o.Rate < 0 || (o.Duration <= 0 && o.Routes <= 0) {
		return errors.New("workers, prompt blocks, clients, blocks, repeat and a duration or route count must be > 0")
	}
	for _, n := range slices.Concat(o.Workers, o.PromptBlocks, o.Clients) {
		if n <= 0 {
			return errors.New("workers, prompt blocks and clients must be > 0")
		}
	}
	return nil
}

// RunRoute times routing decisions: for every (workers, prompt) combination and target it loads a
// synthetic index (untimed), hashes the prompts (untimed), then runs Repeat repeats of: a calibration
// (server stores), and per variant and client count a closed-loop run and, if asked, an open-loop run.
func RunRoute(ctx context.Context, targets []RouteTarget, o RouteOptions) (RouteReport, error) {
	rep := RouteReport{Bench: "route", IndexedBlocks: o.Blocks, Done: !o.NoDone, PredictedTTLMs: o.PredictedTTLMs, ReleaseDelayMs: o.ReleaseDelayMs}
	if len(targets) == 0 {
		return rep, errors.New("no store to benchmark")
	}
	if err := o.defaults(); err != nil {
		return rep, err
	}
	rep.Sharing, rep.Repeat = o.Sharing, o.Repeat
	if o.CallsOut != nil {
		if _, err := io.WriteString(o.CallsOut, callsHeader); err != nil {
			return rep, fmt.Errorf("calls out: %w", err)
		}
	}
	for _, t := range targets {
		rep.Stores = append(rep.Stores, t.Name)
	}
	for _, workers := range o.Workers {
		for _, prompt := range o.PromptBlocks {
			for _, t := range targets {
				if err := routeCombination(ctx, t, workers, prompt, o, &rep); err != nil {
					return rep, fmt.Errorf("%s, %d workers, %d-block prompts: %w", t.Name, workers, prompt, err)
				}
			}
		}
	}
	rep.Summaries = summarizeRoute(rep.Runs)
	if o.Log != nil {
		writeRouteTable(o.Log, rep)
	}
	return rep, nil
}

// benchPrompt is one precomputed prompt.
type benchPrompt struct {
	seq []uint64
	isl int64
}

// routeCombination loads one index on one target and runs every repeat, variant and client count.
func routeCombination(ctx context.Context, t RouteTarget, workers, prompt int, o RouteOptions, rep *RouteReport) (err error) {
	variants, err := t.Open()
	if err != nil {
		return err
	}
	if len(variants) == 0 {
		return errors.New("target opened no store")
	}
	st := variants[0].Store
	defer func() {
		if !t.Keep {
			if derr := dropNamespace(ctx, st); err == nil {
				err = derr
			}
		}
		for _, v := range variants {
			v.Store.Close()
		}
	}()
	b, idx, err := routeIndex(ctx, st, t.Name, workers, prompt, o.Sharing, o.Blocks, o.PredictedTTLMs, t.Keep)
	if err != nil {
		return err
	}
	prompts, prepUs := b.Prompts(prompt, o.PromptPool)
	idx.ClientPrepUs = prepUs
	rep.Indexes = append(rep.Indexes, idx)

	for r := 1; r <= o.Repeat; r++ {
		for _, v := range variants {
			base := RouteRun{Store: t.Name, Workers: workers, PromptBlocks: prompt, Repeat: r}
			if len(variants) > 1 {
				base.Variant = v.Name
			}
			for _, clients := range o.Clients {
				doneUs := 0.0
				if _, ok := v.Store.(serverStats); ok && o.Calibrate > 0 && !o.NoDone {
					c, err := calibrateDone(ctx, v.Store, b.Pool, prompts, o.Calibrate, clients, fmt.Sprintf("cal%d-", r))
					if err != nil {
						return fmt.Errorf("calibration: %w", err)
					}
					c.Store, c.Variant, c.Workers, c.PromptBlocks, c.Repeat = t.Name, base.Variant, workers, prompt, r
					rep.Calibrations = append(rep.Calibrations, c)
					doneUs = c.DoneCPUus
				}
				run := base
				run.Clients, run.Mode = clients, "closed"
				spec := loadSpec{Senders: clients, Duration: o.Duration, Calls: o.Routes * clients}
				if err := routeRun(ctx, v.Store, b.Pool, prompts, spec, !o.NoDone, o.releaser(v.Store), doneUs, &run); err != nil {
					return err
				}
				rep.Runs = append(rep.Runs, run)
				rate := o.Rate
				if o.RateHalf {
					rate = run.DecisionsPerS / 2
				}
				if rate <= 0 {
					continue
				}
				open := base
				open.Clients, open.Mode, open.TargetRate = clients, "open", rate
				spec.Rate, spec.Senders, spec.SpinTail = rate, max(clients, o.Senders), 0
				if _, server := v.Store.(serverStats); server {
					spec.SpinTail = o.SpinTail // an embedded store's own CPU would feed the spinning (DefaultSpinTail)
				}
				open.SpinTailUs = float64(spec.SpinTail) / 1e3
				open.SettleMs = float64(o.Settle.Microseconds()) / 1e3
				settle(ctx, o.Settle)
				var calls *callRecorder
				if o.CallsOut != nil {
					calls = newCallRecorder(spec.slotCount())
					spec.Observe = calls.observe
				}
				if err := routeRun(ctx, v.Store, b.Pool, prompts, spec, !o.NoDone, o.releaser(v.Store), doneUs, &open); err != nil {
					return err
				}
				if calls != nil {
					if err := writeCalls(o.CallsOut, len(rep.Runs), calls); err != nil {
						return fmt.Errorf("calls out: %w", err)
					}
				}
				rep.Runs = append(rep.Runs, open)
			}
		}
	}
	return nil
}

// routeIndex is the route benchmark's index on st (`bench route`, `bench churn`): chains of max(prompt, 64)
// blocks, each on min(sharing, workers) workers, blocks (block, worker) entries in all, in pool
// w<W>-c<C>-k<K>-e<E> (short as a deployment's pool name: key length is paid on every call, docs/REDIS.md
// "Layout 6"). A pool of that name already in st is reused as it is when keep (an index kept
// under a prefix); otherwise the pool is (re)created, its workers registered and the index loaded.
func routeIndex(ctx context.Context, st statestore.Store, store string, workers, prompt, sharing, blocks int, predictedTTLMs int64, keep bool) (*SyntheticIndex, RouteIndex, error) {
	sharing = min(sharing, workers)
	b := NewSyntheticIndex(workers, blocks, max(prompt, 64), sharing)
	b.Pool = fmt.Sprintf("w%d-c%d-k%d-e%d", workers, max(prompt, 64), sharing, blocks)
	b.PredictedTTLMs = predictedTTLMs
	idx := RouteIndex{Store: store, Pool: b.Pool, Workers: workers, PromptBlocks: prompt, Sharing: sharing}
	if len(b.Chains) == 0 {
		return b, idx, fmt.Errorf("%d entries make no chain of %d blocks on %d workers", blocks, max(prompt, 64), sharing)
	}
	if _, gerr := st.GetPool(ctx, b.Pool); gerr == nil && keep {
		idx.Reused = true
		return b, idx, nil
	}
	if err := b.Setup(ctx, st); err != nil {
		return b, idx, err
	}
	start := time.Now()
	if _, err := b.Load(ctx, st, 8); err != nil {
		return b, idx, err
	}
	idx.LoadSeconds = time.Since(start).Seconds()
	return b, idx, nil
}

// Prompts hashes n prompts of promptBlocks blocks (a random chain's first blocks, half of them
// diverging at a random block) and returns them with the client time per prompt, µs.
func (b *SyntheticIndex) Prompts(promptBlocks, n int) ([]benchPrompt, float64) {
	r := rand.New(rand.NewPCG(11, uint64(promptBlocks)))
	out := make([]benchPrompt, n)
	start := time.Now()
	for i := range out {
		local := b.Chains[r.IntN(len(b.Chains))][:promptBlocks]
		if r.IntN(2) == 0 {
			local = slices.Clone(local)
			local[r.IntN(len(local))] ^= 1
		}
		out[i] = benchPrompt{seq: blockhash.Sequence(nil, local), isl: int64(promptBlocks * b.BlockSize)}
	}
	return out, us(time.Since(start)) / float64(max(n, 1))
}

// runSeq numbers runs, so request ids never repeat within a process.
var runSeq atomic.Int64

// releaser returns a run's Releaser (nil: direct dones).
func (o *RouteOptions) releaser(st statestore.Store) Releaser {
	if o.NewReleaser == nil || o.NoDone {
		return nil
	}
	return o.NewReleaser(st)
}

// routeRun makes one run and fills run's measurements. rel, when not nil, carries the dones (Releaser).
func routeRun(ctx context.Context, st statestore.Store, pool string, prompts []benchPrompt, spec loadSpec, done bool, rel Releaser, doneUs float64, run *RouteRun) error {
	seq := runSeq.Add(1)
	idPrefix := fmt.Sprintf("r%d-%d-", seq, time.Now().UnixNano())
	rngs := make([]*rand.Rand, max(spec.Senders, 1))
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(uint64(seq), uint64(i)))
	}
	var slowMu sync.Mutex
	noteSlow := func(op string, t0, t1 time.Time) {
		if d := t1.Sub(t0); d >= SlowClientUs*time.Microsecond {
			slowMu.Lock()
			if len(run.SlowClientCalls) < MaxSlowClientCalls {
				run.SlowClientCalls = append(run.SlowClientCalls, ClientCall{Op: op, StartUnixUs: t0.UnixMicro(), Us: us(d)})
			}
			slowMu.Unlock()
		}
	}
	call := func(s, i int) (time.Time, time.Time, error) {
		p := &prompts[rngs[s].IntN(len(prompts))]
		id := idPrefix + strconv.Itoa(i)
		req := statestore.RouteRequest{Pool: pool, RequestID: id, SeqHashes: p.seq, ISL: p.isl, Random: rngs[s].Float64(), NowMs: time.Now().UnixMilli()}
		t0 := time.Now()
		var err error
		if rel != nil {
			_, err = rel.Route(ctx, req)
		} else {
			_, err = st.Route(ctx, req)
		}
		t1 := time.Now()
		noteSlow("route", t0, t1)
		switch {
		case err != nil || !done:
		case rel != nil:
			rel.Add(pool, id)
		default:
			_, err = st.Done(ctx, pool, id, t1.UnixMilli())
			noteSlow("done", t1, time.Now())
		}
		return t0, t1, err
	}
	ph, err := startPhase(ctx, st)
	if err != nil {
		return err
	}
	clk := openLoopClock(spec.SpinTail)
	cpu0 := processCPU()
	lat, el, lag, svc, err := runLoad(ctx, clk, spec, call)
	if rel != nil {
		rel.Flush("") // the run's last dones, inside its measured phase
	}
	clientCPU := processCPU() - cpu0
	if err != nil {
		return err
	}
	d, slow, server, err := ph.end(ctx)
	if err != nil {
		return err
	}
	run.LoadBefore, run.LoadAfter = ph.load, ReadLoadAvg()
	slices.Sort(lat)
	n := len(lat)
	run.Decisions, run.Seconds, run.DecisionsPerS = n, el.Seconds(), float64(n)/el.Seconds()
	run.P50us, run.P99us = quantileUs(lat, 0.50), quantileUs(lat, 0.99)
	run.ClientCPUus, run.ClientSpinUs, run.ClientBusy = clientUse(clientCPU, spinTime(clk), el, n)
	if n > 0 {
		run.MaxUs = us(lat[n-1])
	}
	if len(lag) > 0 {
		slices.Sort(lag)
		run.LagP50us, run.LagP99us = quantileUs(lag, 0.50), quantileUs(lag, 0.99)
		slices.Sort(svc)
		run.ServiceP50us, run.ServiceP99us = quantileUs(svc, 0.50), quantileUs(svc, 0.99)
	}
	if server && n > 0 {
		run.RedisCPUus = d.CPUSeconds * 1e6 / float64(n)
		run.RedisCPUSysUs = d.CPUSysSeconds * 1e6 / float64(n)
		if done && rel == nil { // (a carried done has no cost of its own to subtract)
			run.RedisCPUusExclDone = run.RedisCPUus - doneUs
		}
		if run.RedisCPUus > 0 {
			run.DecisionsPerCoreS = 1e6 / run.RedisCPUus
		}
		run.CommandUs, run.Calls = d.CommandUsec/float64(n), d.Calls/float64(n)
		run.Slowlog = &slow
	}
	return nil
}

// calibrateDone makes n decisions without done from `clients` concurrent clients, then their n done
// calls at the same concurrency (pipelining changes the CPU per call, so the split is taken at the
// run's own concurrency), and measures each phase's server counters per call.
func calibrateDone(ctx context.Context, st statestore.Store, pool string, prompts []benchPrompt, n, clients int, idPrefix string) (RouteCalibration, error) {
	c := RouteCalibration{Calls: n, Clients: clients}
	idPrefix += strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	rngs := make([]*rand.Rand, clients)
	for i := range rngs {
		rngs[i] = rand.New(rand.NewPCG(3, uint64(i)))
	}
	route := func(s, i int) (time.Time, time.Time, error) {
		p := &prompts[rngs[s].IntN(len(prompts))]
		req := statestore.RouteRequest{Pool: pool, RequestID: idPrefix + strconv.Itoa(i), SeqHashes: p.seq, ISL: p.isl, Random: rngs[s].Float64(), NowMs: time.Now().UnixMilli()}
		_, err := st.Route(ctx, req)
		return time.Time{}, time.Time{}, err
	}
	done := func(_, i int) (time.Time, time.Time, error) {
		_, err := st.Done(ctx, pool, idPrefix+strconv.Itoa(i), time.Now().UnixMilli())
		return time.Time{}, time.Time{}, err
	}
	var d [2]statestore.ServerStats
	for k, call := range []callFunc{route, done} {
		ph, err := startPhase(ctx, st)
		if err != nil {
			return c, err
		}
		if _, _, _, _, err := runLoad(ctx, wallClock{}, loadSpec{Senders: clients, Calls: n}, call); err != nil {
			return c, err
		}
		if d[k], _, _, err = ph.end(ctx); err != nil {
			return c, err
		}
	}
	c.RouteCPUus, c.DoneCPUus = d[0].CPUSeconds*1e6/float64(n), d[1].CPUSeconds*1e6/float64(n)
	c.RouteCommandU, c.DoneCommandUs = d[0].CommandUsec/float64(n), d[1].CommandUsec/float64(n)
	return c, nil
}

// summarizeRoute groups runs by (store, variant, workers, prompt, clients, mode), in first-seen order.
func summarizeRoute(runs []RouteRun) []RouteSummary {
	type key struct {
		store, variant, mode     string
		workers, prompt, clients int
	}
	var order []key
	groups := map[key][]RouteRun{}
	for _, r := range runs {
		k := key{r.Store, r.Variant, r.Mode, r.Workers, r.PromptBlocks, r.Clients}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	var out []RouteSummary
	for _, k := range order {
		g := groups[k]
		col := func(f func(RouteRun) float64) Summary {
			xs := make([]float64, len(g))
			for i, r := range g {
				xs[i] = f(r)
			}
			return Summarize(xs)
		}
		s := RouteSummary{Store: k.store, Variant: k.variant, Workers: k.workers, PromptBlocks: k.prompt, Clients: k.clients, Mode: k.mode, Runs: len(g),
			TargetRate:         col(func(r RouteRun) float64 { return r.TargetRate }),
			DecisionsPerS:      col(func(r RouteRun) float64 { return r.DecisionsPerS }),
			P50us:              col(func(r RouteRun) float64 { return r.P50us }),
			P99us:              col(func(r RouteRun) float64 { return r.P99us }),
			MaxUs:              col(func(r RouteRun) float64 { return r.MaxUs }),
			LagP50us:           col(func(r RouteRun) float64 { return r.LagP50us }),
			LagP99us:           col(func(r RouteRun) float64 { return r.LagP99us }),
			ServiceP50us:       col(func(r RouteRun) float64 { return r.ServiceP50us }),
			ServiceP99us:       col(func(r RouteRun) float64 { return r.ServiceP99us }),
			ClientCPUus:        col(func(r RouteRun) float64 { return r.ClientCPUus }),
			ClientSpinUs:       col(func(r RouteRun) float64 { return r.ClientSpinUs }),
			ClientBusy:         col(func(r RouteRun) float64 { return r.ClientBusy }),
			RedisCPUus:         col(func(r RouteRun) float64 { return r.RedisCPUus }),
			RedisCPUusExclDone: col(func(r RouteRun) float64 { return r.RedisCPUusExclDone }),
			RedisCPUSysUs:      col(func(r RouteRun) float64 { return r.RedisCPUSysUs }),
			DecisionsPerCoreS:  col(func(r RouteRun) float64 { return r.DecisionsPerCoreS }),
			CommandUs:          col(func(r RouteRun) float64 { return r.CommandUs }),
		}
		var loads []float64
		for _, r := range g {
			loads = append(loads, r.LoadBefore[0], r.LoadAfter[0])
			if r.Slowlog != nil {
				s.SlowCalls += r.Slowlog.Logged
				s.SlowAll += r.Slowlog.LoggedAll
				s.SlowMaxUs = max(s.SlowMaxUs, r.Slowlog.MaxUs)
			}
		}
		s.Load = Summarize(loads)
		out = append(out, s)
	}
	return out
}
