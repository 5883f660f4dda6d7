package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"

	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/simulation/traces"
)

// LoadOptions shape a workload from a trace: which requests, how fast they arrive, at which engine
// block size they are hashed.
type LoadOptions struct {
	// Skip drops the trace's first Skip requests; Requests keeps at most that many after them (0 = all).
	Skip, Requests int
	// Fanout turns every trace request into Fanout siblings with the same prompt arriving together
	// (best-of-N sampling, agent fan-out). Default 1.
	Fanout int
	// Speedup divides the trace's inter-arrival times (2 = twice the rate). Default 1. Ignored when
	// Rate or Rho is set.
	Speedup float64
	// Rate > 0 replaces the trace's timestamps by a Poisson process of Rate requests/s (seeded by
	// Seed), keeping the trace's order of requests.
	Rate float64
	// Rho > 0 picks the speedup (or, with Rate, the rate is ignored) so that the offered cache-blind
	// utilisation ρ0 equals Rho.
	Rho float64
	// Seed drives every random draw of the workload (Poisson arrivals, synthetic prefixes).
	Seed uint64
	// EngineBlock is the engine's KV block size, tokens: the prompts' hashes are computed at it.
	EngineBlock int
	// Synthetic shapes the prefix tree given to traces without prefix information (Azure).
	Synthetic traces.SyntheticOptions
}

// Workload is a trace ready to simulate: requests, arrival times and block hashes. It is read-only
// once built and may be shared by concurrent runs.
type Workload struct {
	Name        string
	Reqs        []traces.Request
	ArrivalMs   []float64 // non-decreasing, starting at 0
	Local, Seq  [][]uint64
	EngineBlock int
	Speedup     float64 // the effective speedup (0 with Poisson arrivals)
	Rate        float64 // the Poisson rate, req/s (0 with trace timestamps)

	InputTokens, OutputTokens int64
	BlockRefs                 int64   // Σ ceil(input / engine block): the hit rates' denominator
	SpanMs                    float64 // last arrival − first arrival
	// ReuseBlocks and ReuseTokens are the infinite-cache bound (traces.ReuseBound) at EngineBlock.
	ReuseBlocks, ReuseTokens float64
}

// LoadTrace reads a Mooncake JSONL trace, or an Azure CSV trace (".csv", given synthetic prefixes),
// from a file (plain or ".gz") or a bundled trace (traces.MooncakeConversation; see traces.Open). The
// name returned is the trace's title for a bundled trace, else the file's base name.
func LoadTrace(path string, synth traces.SyntheticOptions) ([]traces.Request, string, error) {
	name := filepath.Base(path)
	if strings.HasPrefix(path, traces.BundledPrefix) {
		name = traces.Title(path)
	}
	if strings.EqualFold(filepath.Ext(strings.TrimSuffix(path, ".gz")), ".csv") {
		reqs, err := traces.LoadAzureFile(path)
		if err != nil {
			return nil, "", err
		}
		reqs, err = traces.SyntheticPrefixes(reqs, synth)
		if err != nil {
			return nil, "", err
		}
		return reqs, name + " (synthetic prefixes)", nil
	}
	reqs, err := traces.LoadMooncakeFile(path)
	return reqs, name, err
}

// NewWorkload windows reqs, sets the arrival times and hashes every prompt at o.EngineBlock. eng
// (defaults applied) and workers define the fleet capacity for ρ0 and Rho.
func NewWorkload(name string, reqs []traces.Request, o LoadOptions, eng engine.Options, workers int) (*Workload, error) {
	if o.EngineBlock < 1 || traces.TraceBlockTokens%o.EngineBlock != 0 {
		return nil, fmt.Errorf("engine block %d must divide %d", o.EngineBlock, traces.TraceBlockTokens)
	}
	if o.Skip < 0 || o.Requests < 0 || o.Fanout < 0 || o.Speedup < 0 || o.Rate < 0 || o.Rho < 0 ||
		math.IsNaN(o.Speedup) || math.IsNaN(o.Rate) || math.IsNaN(o.Rho) || math.IsInf(o.Speedup+o.Rate+o.Rho, 0) {
		return nil, fmt.Errorf("workload options must be finite and >= 0")
	}
	if workers < 1 {
		return nil, fmt.Errorf("workers %d < 1", workers)
	}
	if o.Skip >= len(reqs) {
		return nil, fmt.Errorf("--skip %d leaves none of the trace's %d requests", o.Skip, len(reqs))
	}
	reqs = reqs[o.Skip:]
	if o.Requests > 0 && o.Requests < len(reqs) {
		reqs = reqs[:o.Requests]
	}
	fan := max(o.Fanout, 1)
	if fan > 1 {
		out := make([]traces.Request, 0, len(reqs)*fan)
		for _, r := range reqs {
			for range fan {
				out = append(out, r)
			}
		}
		reqs = out
	}
	w := &Workload{Name: name, Reqs: reqs, EngineBlock: o.EngineBlock, ArrivalMs: make([]float64, len(reqs)),
		Local: make([][]uint64, len(reqs)), Seq: make([][]uint64, len(reqs))}
	for i, r := range reqs {
		if i%fan == 0 {
			w.Local[i], w.Seq[i] = traces.BlockHashes(r, o.EngineBlock, "")
		} else { // siblings share the (read-only) hash slices
			w.Local[i], w.Seq[i] = w.Local[i-1], w.Seq[i-1]
		}
		w.InputTokens += int64(r.InputTokens)
		w.OutputTokens += int64(r.OutputTokens)
		w.BlockRefs += int64((r.InputTokens + o.EngineBlock - 1) / o.EngineBlock)
	}
	w.ReuseBlocks, w.ReuseTokens = traces.ReuseBound(reqs, o.EngineBlock)

	// Base arrivals (speedup 1 or rate as given), then scale to the target ρ0 if asked.
	t0 := float64(reqs[0].ArrivalMs)
	if o.Rate > 0 {
		rng := rand.New(rand.NewPCG(o.Seed, 0xa771_7a15))
		t := 0.0
		for i := range reqs {
			if i > 0 && i%fan == 0 {
				t += rng.ExpFloat64() / o.Rate * 1000
			}
			w.ArrivalMs[i] = t
		}
		w.Rate = o.Rate
	} else {
		for i, r := range reqs {
			w.ArrivalMs[i] = float64(r.ArrivalMs) - t0
		}
		w.Speedup = 1
	}
	scale := 1.0
	if o.Rho > 0 {
		if r := w.rho(eng, workers); r > 0 {
			scale = o.Rho / r
		}
	} else if o.Rate == 0 && o.Speedup > 0 {
		scale = o.Speedup
	}
	if scale != 1 {
		for i := range w.ArrivalMs {
			w.ArrivalMs[i] /= scale
		}
		if w.Rate > 0 {
			w.Rate *= scale
		} else {
			w.Speedup = scale
		}
	}
	w.SpanMs = w.ArrivalMs[len(w.ArrivalMs)-1] - w.ArrivalMs[0]
	return w, nil
}

// PrefillCapacity is one engine's prefill throughput, tokens/ms: full chunks of MaxNumBatchedTokens
// prompt tokens back to back (eng with defaults applied).
func PrefillCapacity(eng engine.Options) float64 {
	return float64(eng.MaxNumBatchedTokens) / eng.StepMs(eng.MaxNumBatchedTokens, 0, 0)
}

// Rho0 is the offered cache-blind utilisation: the prompt tokens offered per ms (every prompt
// computed in full, no cache hit) over the fleet's prefill capacity (workers × PrefillCapacity).
// Zero for a workload whose arrivals span no time.
func (w *Workload) Rho0(eng engine.Options, workers int) float64 { return w.rho(eng, workers) }

// RhoWork is the offered total-work utilisation: prefill and decode work offered per ms over the
// fleet's time (workers × 1 ms per ms), with the engine's step costs, so that "overloaded" (≥ 1) means
// the same on every trace whatever its ratio of prompt to output tokens. Per request:
//
//	prefill_ms = input / PrefillCapacity                      (full chunks, as ρ0; no cache hit)
//	decode_ms  = output · (DecodeMsPerSeq + ContextMsPerToken·(input + output/2) + StepOverheadMs/R)
//
// where R = min(MaxNumSeqs, KV tokens / mean (input + output)) is the batch the KV cache can hold: the
// step overhead is shared by a full batch (ideal batching). It is thus a lower bound on the busy
// fraction a cache-blind fleet needs; ρ0 is its prefill part. Zero when arrivals span no time.
func (w *Workload) RhoWork(eng engine.Options, workers int) float64 {
	span := w.ArrivalMs[len(w.ArrivalMs)-1] - w.ArrivalMs[0]
	if span <= 0 {
		return 0
	}
	n := float64(len(w.Reqs))
	footprint := float64(w.InputTokens+w.OutputTokens) / n
	batch := float64(eng.MaxNumSeqs)
	if footprint > 0 {
		batch = min(batch, max(1, math.Floor(float64(eng.NumBlocks*eng.BlockSize)/footprint)))
	}
	perDecode := eng.DecodeMsPerSeq + eng.StepOverheadMs/batch
	work := float64(w.InputTokens) / PrefillCapacity(eng)
	for _, r := range w.Reqs {
		out := float64(r.OutputTokens)
		work += out * (perDecode + eng.ContextMsPerToken*(float64(r.InputTokens)+out/2))
	}
	return work * (n - 1) / n / span / float64(workers)
}

func (w *Workload) rho(eng engine.Options, workers int) float64 {
	span := w.ArrivalMs[len(w.ArrivalMs)-1] - w.ArrivalMs[0]
	if span <= 0 {
		return 0
	}
	// n arrivals span n−1 gaps: count the tokens of n−1 requests per span (an unbiased rate).
	n := float64(len(w.ArrivalMs))
	offered := float64(w.InputTokens) * (n - 1) / n / span
	return offered / (float64(workers) * PrefillCapacity(eng))
}
