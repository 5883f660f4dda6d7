package engine

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
)

// prompt returns a request whose prompt is n tokens of the given token value (full blocks hashed).
func prompt(id uint64, input, output int, bs int, tok uint32) Request {
	toks := make([]uint32, input)
	for i := range toks {
		toks[i] = tok
	}
	local := blockhash.LocalHashes(nil, toks, bs, blockhash.Seed)
	return Request{ID: id, InputTokens: input, OutputTokens: output, LocalHashes: local, SeqHashes: blockhash.Sequence(nil, local)}
}

// trace is everything observable from a run, copied out of the reused StepResults.
type trace struct {
	Steps       []StepResult
	FirstToken  map[uint64]float64
	Finish      map[uint64]float64
	Admitted    []Admission
	Preempted   []uint64
	Events      []Event
	MaxRunning  int
	MaxKVUsage  float64
	StepsWithKV int
}

// drive submits reqs at their arrival times and steps the engine until it is idle.
func drive(t *testing.T, e *Engine, reqs []Request, arrivals []float64) *trace {
	t.Helper()
	tr := &trace{FirstToken: map[uint64]float64{}, Finish: map[uint64]float64{}}
	next := 0
	now := 0.0
	for {
		tNext, ok := e.NextEventTime()
		if next < len(reqs) && (!ok || arrivals[next] <= tNext) {
			now = max(now, arrivals[next])
			if err := e.Submit(reqs[next], now); err != nil {
				t.Fatal(err)
			}
			next++
			continue
		}
		if !ok {
			return tr
		}
		now = max(now, tNext)
		r := e.Step(now)
		cp := r
		cp.Admitted, cp.FirstTokens, cp.Finished = slices.Clone(r.Admitted), slices.Clone(r.FirstTokens), slices.Clone(r.Finished)
		cp.Preempted, cp.Events = slices.Clone(r.Preempted), slices.Clone(r.Events)
		tr.Steps = append(tr.Steps, cp)
		for _, f := range r.FirstTokens {
			if _, dup := tr.FirstToken[f.ID]; dup {
				t.Fatalf("request %d: two first tokens", f.ID)
			}
			tr.FirstToken[f.ID] = f.TimeMs
		}
		for _, f := range r.Finished {
			tr.Finish[f.ID] = f.TimeMs
		}
		tr.Admitted = append(tr.Admitted, r.Admitted...)
		tr.Preempted = append(tr.Preempted, r.Preempted...)
		tr.Events = append(tr.Events, r.Events...)
		running, _, _ := e.Active()
		tr.MaxRunning = max(tr.MaxRunning, running)
		tr.MaxKVUsage = max(tr.MaxKVUsage, e.KVUsage())
		if r.PrefillTokens+r.DecodeSeqs > e.Options().MaxNumBatchedTokens {
			t.Fatalf("step over the token budget: %+v", r)
		}
		if r.EndMs < r.StartMs || (r.EndMs == r.StartMs && len(r.Admitted)+len(r.Preempted) == 0) {
			t.Fatalf("step made no progress: %+v", r)
		}
	}
}

func mustNew(t testing.TB, o Options) *Engine {
	t.Helper()
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// One request, no reuse: the first token comes after the hand-computed chunked prefill steps, then
// one decode step per further token.
func TestFirstTokenTimeNoReuse(t *testing.T) {
	e := mustNew(t, Options{})
	req := prompt(1, 10000, 3, 16, 7)
	tr := drive(t, e, []Request{req}, []float64{100})
	// Defaults: 6 ms per step, 0.025 ms per prefill token, 0.025 ms per decode, 0.00004 ms per context token.
	step1 := 6 + 0.025*8192                // first chunk: 8192 tokens, no context
	step2 := 6 + 0.025*1808 + 0.00004*8192 // last chunk attends to the first
	wantFirst := 100 + step1 + step2
	if got := tr.FirstToken[1]; !near(got, wantFirst) {
		t.Fatalf("first token at %v ms, want %v", got, wantFirst)
	}
	decode := func(ctx int) float64 { return 6 + 0.025 + 0.00004*float64(ctx) }
	wantFinish := wantFirst + decode(10000) + decode(10001)
	if got := tr.Finish[1]; !near(got, wantFinish) {
		t.Fatalf("finish at %v ms, want %v", got, wantFinish)
	}
	if len(tr.Steps) != 4 || tr.Steps[0].PrefillTokens != 8192 || tr.Steps[1].ContextTokens != 8192 || tr.Steps[2].DecodeSeqs != 1 {
		t.Fatalf("steps: %+v", tr.Steps)
	}
	// The prompt's 625 full blocks were cached over the two chunks, in chain order.
	if n := storedBlocks(tr.Events); n != 625 || e.Pool().Cached() != 625 || e.Pool().Used() != 0 {
		t.Fatalf("stored %d blocks, cached %d, used %d", n, e.Pool().Cached(), e.Pool().Used())
	}
	if !tr.Events[1].HasParent || tr.Events[1].ParentEngineHash != e.Pool().EngineHash(req.SeqHashes[511]) {
		t.Fatalf("second chunk must continue block 511: %+v", tr.Events[1])
	}
}

func storedBlocks(evs []Event) int {
	n := 0
	for _, ev := range evs {
		n += len(ev.Blocks)
	}
	return n
}

// A repeated prompt hits the cache: only the last block is recomputed (vLLM computes >= 1 token).
func TestPrefixReuseHits(t *testing.T) {
	e := mustNew(t, Options{})
	a := prompt(1, 4096, 1, 16, 3)
	b := prompt(2, 4096, 1, 16, 3)
	c := prompt(3, 4100, 1, 16, 3) // same 256 blocks + 4 tokens
	tr := drive(t, e, []Request{a, b, c}, []float64{0, 1000, 2000})
	if tr.Admitted[0].CachedTokens != 0 || tr.Admitted[1].CachedTokens != 4080 || tr.Admitted[2].CachedTokens != 4096 {
		t.Fatalf("admissions %+v", tr.Admitted)
	}
	if got, want := tr.FirstToken[2]-1000, 6+0.025*16+0.00004*4080; !near(got, want) {
		t.Fatalf("cached TTFT %v, want %v", got, want)
	}
	if got, want := tr.FirstToken[3]-2000, 6+0.025*4+0.00004*4096; !near(got, want) {
		t.Fatalf("cached TTFT %v, want %v", got, want)
	}
	if storedBlocks(tr.Events) != 256 {
		t.Fatalf("hits must store nothing new: %d blocks stored", storedBlocks(tr.Events))
	}
}

// Decode growth beyond the pool preempts the newest request, which later resumes and recomputes.
func TestPreemption(t *testing.T) {
	e := mustNew(t, Options{NumBlocks: 12})
	a := prompt(1, 64, 80, 16, 1) // peaks at ceil(143/16) = 9 blocks
	b := prompt(2, 64, 80, 16, 2)
	r := newReplay(t)
	tr := drive(t, e, []Request{a, b}, []float64{0, 0})
	for _, ev := range tr.Events {
		r.sink(ev)
	}
	r.check(e.Pool())
	if len(tr.Preempted) == 0 || tr.Preempted[0] != 2 {
		t.Fatalf("want request 2 (the newest) preempted, got %v", tr.Preempted)
	}
	var resumed *Admission
	for i := range tr.Admitted {
		if tr.Admitted[i].Resumed {
			resumed = &tr.Admitted[i]
		}
	}
	// Its released prompt blocks stay cached, leaf first in the free queue: part survives a's growth.
	if resumed == nil || resumed.ID != 2 || resumed.CachedTokens == 0 || resumed.CachedTokens > 64 {
		t.Fatalf("request 2 must resume on (part of) its cached prompt: %+v", tr.Admitted)
	}
	if len(tr.Finish) != 2 || tr.Finish[1] >= tr.Finish[2] {
		t.Fatalf("finishes %v", tr.Finish)
	}
	if _, ok := tr.FirstToken[2]; !ok || len(tr.FirstToken) != 2 {
		t.Fatalf("first tokens %v (a resumed request must not report a second one)", tr.FirstToken)
	}
	// The resumed request recomputed its generated tokens: some step prefilled more than 1 token of it.
	if e.Pool().Used() != 0 || e.KVUsage() != 0 {
		t.Fatalf("blocks leaked: %s", e.Pool().Dump())
	}
}

func TestChunkedPrefillSharesBudgetWithDecodes(t *testing.T) {
	e := mustNew(t, Options{MaxNumBatchedTokens: 1000})
	tr := drive(t, e, []Request{prompt(1, 100, 50, 16, 1), prompt(2, 3000, 1, 16, 2)}, []float64{0, 1})
	// From step 2: request 1 decodes (1 token), request 2 prefills in chunks of the remaining 999.
	if s := tr.Steps[1]; s.DecodeSeqs != 1 || s.PrefillTokens != 999 || len(s.Admitted) != 1 {
		t.Fatalf("step 2: %+v", s)
	}
	for i, want := range []int{999, 999, 999, 3} {
		if s := tr.Steps[1+i]; s.PrefillTokens != want || s.DecodeSeqs != 1 {
			t.Fatalf("step %d: %+v, want a chunk of %d beside one decode", 2+i, s, want)
		}
	}
	if got := tr.Steps[4].ContextTokens; got != 2997+100+3 {
		t.Fatalf("step 5 context %d, want the chunk's 2997 earlier tokens plus the decode's 103", got)
	}
}

func TestMaxNumSeqs(t *testing.T) {
	e := mustNew(t, Options{MaxNumSeqs: 3})
	var reqs []Request
	var at []float64
	for i := range 10 {
		reqs = append(reqs, prompt(uint64(i), 50, 20, 16, uint32(i)))
		at = append(at, 0)
	}
	tr := drive(t, e, reqs, at)
	if tr.MaxRunning != 3 || len(tr.Finish) != 10 {
		t.Fatalf("max running %d, finished %d", tr.MaxRunning, len(tr.Finish))
	}
}

func TestSubmitErrors(t *testing.T) {
	e := mustNew(t, Options{NumBlocks: 4})
	ok := prompt(1, 32, 1, 16, 1)
	if err := e.Submit(ok, 0); err != nil {
		t.Fatal(err)
	}
	bad := map[string]Request{
		"duplicate":   ok,
		"empty":       {ID: 2},
		"negative":    {ID: 3, InputTokens: 1, OutputTokens: -1},
		"mismatched":  {ID: 4, InputTokens: 32, SeqHashes: []uint64{1}},
		"too many":    {ID: 5, InputTokens: 31, SeqHashes: []uint64{1, 2}, LocalHashes: []uint64{1, 2}},
		"too long":    {ID: 6, InputTokens: 60, OutputTokens: 6},
		"alone ok 65": {ID: 7, InputTokens: 60, OutputTokens: 5},
	}
	for name, r := range bad {
		err := e.Submit(r, 0)
		if (err == nil) != (name == "alone ok 65") {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if _, err := New(Options{BlockSize: -1}); err == nil {
		t.Error("negative block size accepted")
	}
	if _, err := New(Options{PrefillMsPerToken: math.NaN()}); err == nil {
		t.Error("NaN cost accepted")
	}
}

func TestNextEventTimeAndActive(t *testing.T) {
	e := mustNew(t, Options{})
	if _, ok := e.NextEventTime(); ok {
		t.Fatal("idle engine has an event")
	}
	e.Submit(prompt(1, 20000, 2, 16, 1), 250)
	if ms, ok := e.NextEventTime(); !ok || ms != 250 {
		t.Fatalf("next %v %v, want 250", ms, ok)
	}
	if r, w, q := e.Active(); r != 0 || w != 1 || q != 20000 {
		t.Fatalf("active %d %d %d", r, w, q)
	}
	res := e.Step(250)
	if r, w, q := e.Active(); r != 1 || w != 0 || q != 20000-8192 {
		t.Fatalf("active %d %d %d", r, w, q)
	}
	if ms, _ := e.NextEventTime(); ms != res.EndMs || e.KVUsage() <= 0 {
		t.Fatalf("next %v, want the step's end %v", ms, res.EndMs)
	}
	// Submitting while busy does not move the next step earlier; stepping early waits for the end.
	e.Submit(prompt(2, 10, 1, 16, 2), 260)
	if res2 := e.Step(260); res2.StartMs != res.EndMs {
		t.Fatalf("step started at %v during the previous step (ends %v)", res2.StartMs, res.EndMs)
	}
}

// randomWorkload makes requests with shared prefixes (a few "system prompts" and repeats).
func randomWorkload(n int, seed uint64, bs int) ([]Request, []float64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var reqs []Request
	var at []float64
	now := 0.0
	for i := range n {
		var toks []uint32
		for range 1 + rng.IntN(4) {
			v := uint32(rng.IntN(6)) // 512-token segments from a small alphabet
			for range 512 {
				toks = append(toks, v)
			}
		}
		toks = toks[:len(toks)-rng.IntN(300)]
		local := blockhash.LocalHashes(nil, toks, bs, blockhash.Seed)
		reqs = append(reqs, Request{ID: uint64(i), InputTokens: len(toks), OutputTokens: 1 + rng.IntN(200),
			LocalHashes: local, SeqHashes: blockhash.Sequence(nil, local)})
		now += rng.ExpFloat64() * 20
		at = append(at, now)
	}
	return reqs, at
}

// Under cache pressure and preemption: every Stored block is later Removed or still resident, every
// request finishes once, nothing leaks, and the run is deterministic.
func TestEngineRandomConsistentAndDeterministic(t *testing.T) {
	run := func() *trace {
		e := mustNew(t, Options{NumBlocks: 600, Salt: 9})
		reqs, at := randomWorkload(400, 3, 16)
		tr := drive(t, e, reqs, at)
		r := newReplay(t)
		for _, ev := range tr.Events {
			r.sink(ev)
		}
		r.check(e.Pool())
		if len(tr.Finish) != len(reqs) || len(tr.FirstToken) != len(reqs) {
			t.Fatalf("finished %d, first tokens %d, of %d", len(tr.Finish), len(tr.FirstToken), len(reqs))
		}
		for id, f := range tr.Finish {
			if f < tr.FirstToken[id] || tr.FirstToken[id] < at[id] {
				t.Fatalf("request %d: arrival %v first %v finish %v", id, at[id], tr.FirstToken[id], f)
			}
		}
		if e.Pool().Used() != 0 || r.evict == 0 || len(tr.Preempted) == 0 {
			t.Fatalf("used %d, evictions %d, preemptions %d: want pressure and no leak", e.Pool().Used(), r.evict, len(tr.Preempted))
		}
		hits := 0
		for _, a := range tr.Admitted {
			hits += a.CachedTokens
		}
		if hits == 0 {
			t.Fatal("no prefix hits in a workload built from shared prefixes")
		}
		return tr
	}
	a, b := run(), run()
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same inputs, different runs")
	}
}
