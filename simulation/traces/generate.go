package traces

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Generated workload kinds (GenerateOptions.Kind).
const (
	// WorkloadSharedPrefix: many users sharing a few long system prompts (SGLang's
	// generated-shared-prefix benchmark): each request is one of Prefixes system prompts of PrefixTokens
	// (drawn uniformly) followed by a fresh question of about UserTokens.
	WorkloadSharedPrefix = "shared-prefix"
	// WorkloadMultiTurn: chat conversations with growing context. A conversation starts with one of
	// Prefixes system prompts; each of its about Turns turns resends the whole history (previous prompt,
	// answer, a new message of about UserTokens) after a think time.
	WorkloadMultiTurn = "multi-turn"
	// WorkloadFanout: agent fan-out. A task is one of Prefixes agent prompts plus a fresh context of
	// about UserTokens; Siblings requests with that one prompt arrive together (parallel tool calls,
	// best-of-n sampling).
	WorkloadFanout = "fanout"
	// WorkloadMix interleaves the three above, a third of the requests each at a third of the rate, on
	// one clock; each part keeps its own kind's Prefixes, PrefixTokens and UserTokens defaults.
	WorkloadMix = "mix"
)

// WorkloadKinds lists the generated workloads.
var WorkloadKinds = []string{WorkloadSharedPrefix, WorkloadMultiTurn, WorkloadFanout, WorkloadMix}

// GenerateOptions shape a generated workload. A zero field takes its kind's default (listed per field
// as shared-prefix / multi-turn / fanout). Lengths of user text and outputs are drawn uniformly in
// [mean/2, 3·mean/2]; prefix sharing is whole 512-token trace blocks, as in the Mooncake traces.
type GenerateOptions struct {
	// Kind is one of WorkloadKinds.
	Kind string
	// Requests to generate. Default 2000.
	Requests int
	// Seed drives every draw: the same options give the same requests, byte for byte.
	Seed uint64
	// RateReqS is the mean arrival rate, requests/s (Poisson). Default 10. simulate's --rho rescales
	// the timestamps, keeping fan-out siblings together and think times proportional.
	RateReqS float64
	// Prefixes is the number of distinct shared prompts (system or agent prompts). Default 64 / 4 / 4 (shared-prefix: 64 × 8 k = 512 k tokens, more than one default engine caches, far less than eight).
	Prefixes int
	// PrefixTokens is each shared prompt's length, tokens, rounded up to whole 512-token blocks.
	// Default 8192 / 1024 / 2048.
	PrefixTokens int
	// UserTokens is the mean length of the unshared part: a question, a turn's message, a task's
	// context. Default 512 / 256 / 4096.
	UserTokens int
	// OutputTokens is the mean answer length. Default 256.
	OutputTokens int
	// Turns is the mean number of turns of a conversation (multi-turn; drawn in [1, 2·Turns − 1]).
	// Default 6.
	Turns int
	// ThinkMs is the mean time between a conversation's turns, ms (exponential). Default 20 000.
	ThinkMs float64
	// Siblings is the fan-out of a task (fanout). Default 8.
	Siblings int
}

func (o GenerateOptions) withDefaults() GenerateOptions {
	def := func(v *int, shared, multi, fan int) {
		if *v == 0 {
			switch o.Kind {
			case WorkloadSharedPrefix:
				*v = shared
			case WorkloadMultiTurn:
				*v = multi
			default:
				*v = fan
			}
		}
	}
	if o.Requests == 0 {
		o.Requests = 2000
	}
	if o.RateReqS == 0 {
		o.RateReqS = 10
	}
	def(&o.Prefixes, 64, 4, 4)
	def(&o.PrefixTokens, 8192, 1024, 2048)
	def(&o.UserTokens, 512, 256, 4096)
	if o.OutputTokens == 0 {
		o.OutputTokens = 256
	}
	if o.Turns == 0 {
		o.Turns = 6
	}
	if o.ThinkMs == 0 {
		o.ThinkMs = 20000
	}
	if o.Siblings == 0 {
		o.Siblings = 8
	}
	return o
}

// Validate reports the first invalid field, after defaults.
func (o GenerateOptions) Validate() error {
	if !slices.Contains(WorkloadKinds, o.Kind) {
		return fmt.Errorf("unknown workload %q (known: %v)", o.Kind, WorkloadKinds)
	}
	o = o.withDefaults()
	switch {
	case o.Requests < 1 || o.Requests > 10_000_000:
		return fmt.Errorf("requests %d out of [1, 10000000]", o.Requests)
	case !(o.RateReqS > 0) || o.RateReqS > 1e9:
		return fmt.Errorf("rate %v must be in (0, 1e9] requests/s", o.RateReqS)
	case o.Prefixes < 1:
		return fmt.Errorf("prefixes %d < 1", o.Prefixes)
	case o.PrefixTokens < 0 || o.UserTokens < 2 || o.OutputTokens < 2:
		return fmt.Errorf("prefix tokens %d must be >= 0, user tokens %d and output tokens %d >= 2", o.PrefixTokens, o.UserTokens, o.OutputTokens)
	case o.PrefixTokens > 1<<20 || o.UserTokens > 1<<20 || o.OutputTokens > 1<<20:
		return fmt.Errorf("token lengths must be <= %d", 1<<20)
	case o.Turns < 1 || o.Turns > 1000:
		return fmt.Errorf("turns %d out of [1, 1000]", o.Turns)
	case !(o.ThinkMs >= 0) || o.ThinkMs > 1e9:
		return fmt.Errorf("think time %v ms out of [0, 1e9]", o.ThinkMs)
	case o.Siblings < 1 || o.Siblings > 1024:
		return fmt.Errorf("siblings %d out of [1, 1024]", o.Siblings)
	}
	return nil
}

// generator holds the draws of one generated workload: one PCG stream and one id space.
type generator struct {
	o        GenerateOptions
	rng      *rand.Rand
	nextID   uint64
	sessions int
}

func (g *generator) fresh() uint64 { g.nextID++; return g.nextID - 1 }

func (g *generator) session() int { g.sessions++; return g.sessions }

// around draws uniformly in [mean/2, 3·mean/2] (mean >= 2).
func (g *generator) around(mean int) int { return mean/2 + g.rng.IntN(mean+1) }

// gap draws an exponential inter-arrival time of mean meanMs.
func (g *generator) gap(meanMs float64) float64 { return g.rng.ExpFloat64() * meanMs }

// prefixes allocates n shared prompts of the options' length, in whole trace blocks.
func (g *generator) prefixes(n int) [][]uint64 {
	blocks := traceBlocks(g.o.PrefixTokens)
	out := make([][]uint64, n)
	for i := range out {
		out[i] = make([]uint64, blocks)
		for b := range out[i] {
			out[i][b] = g.fresh()
		}
	}
	return out
}

// request builds a prompt of ids (shared whole blocks) followed by extra fresh tokens.
func (g *generator) request(t float64, shared []uint64, extra, output, session int) Request {
	in := len(shared)*TraceBlockTokens + extra
	ids := make([]uint64, len(shared), traceBlocks(in))
	copy(ids, shared)
	for len(ids) < traceBlocks(in) {
		ids = append(ids, g.fresh())
	}
	return Request{ArrivalMs: int64(t), InputTokens: in, OutputTokens: output, HashIDs: ids, Session: session}
}

// Generate returns a seeded synthetic workload of o.Kind, sorted by arrival (ties keep generation
// order), ids dense from 0, arrivals starting at 0. Deterministic: the same options give the same
// requests on every machine.
func Generate(o GenerateOptions) ([]Request, error) {
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("traces: generate: %w", err)
	}
	o = o.withDefaults()
	g := &generator{o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x6e6e_7761_7264_6c6f))}
	var reqs []Request
	if o.Kind == WorkloadMix {
		n := o.Requests
		for i, kind := range []string{WorkloadSharedPrefix, WorkloadMultiTurn, WorkloadFanout} {
			sub := o // lengths of the shared and user parts: each kind's defaults
			sub.Kind, sub.Requests, sub.RateReqS = kind, n/3, o.RateReqS/3
			sub.Prefixes, sub.PrefixTokens, sub.UserTokens = 0, 0, 0
			if i == 0 {
				sub.Requests += n % 3
			}
			if sub.Requests == 0 {
				continue
			}
			sub = sub.withDefaults()
			gs := &generator{o: sub, rng: g.rng, nextID: g.nextID, sessions: g.sessions}
			part := gs.generate()
			g.nextID, g.sessions = gs.nextID, gs.sessions
			reqs = append(reqs, part...)
		}
	} else {
		reqs = g.generate()
	}
	sortByArrival(reqs)
	renumber(reqs)
	if t0 := reqs[0].ArrivalMs; t0 != 0 {
		for i := range reqs {
			reqs[i].ArrivalMs -= t0
		}
	}
	return reqs, nil
}

// sortByArrival sorts reqs by arrival, stably.
func sortByArrival(reqs []Request) {
	slices.SortStableFunc(reqs, func(a, b Request) int {
		switch {
		case a.ArrivalMs < b.ArrivalMs:
			return -1
		case a.ArrivalMs > b.ArrivalMs:
			return 1
		}
		return 0
	})
}

// generate draws g.o.Requests requests of one kind (not mix), sorted by arrival.
func (g *generator) generate() []Request {
	o := g.o
	reqs := make([]Request, 0, o.Requests)
	meanGap := 1000 / o.RateReqS
	shared := g.prefixes(o.Prefixes)
	switch o.Kind {
	case WorkloadSharedPrefix:
		t := 0.0
		for i := range o.Requests {
			if i > 0 {
				t += g.gap(meanGap)
			}
			reqs = append(reqs, g.request(t, shared[g.rng.IntN(len(shared))], g.around(o.UserTokens), g.around(o.OutputTokens), g.session()))
		}
	case WorkloadMultiTurn:
		// Conversations start as a Poisson process at rate/Turns, so that requests arrive at about rate
		// once the first conversations have grown. Conversations are drawn until twice the requests
		// exist; the first Requests by arrival are kept (a steady rate, no thinning tail of last turns).
		t := 0.0
		for c := 0; len(reqs) < 2*o.Requests; c++ {
			if c > 0 {
				t += g.gap(meanGap * float64(o.Turns))
			}
			ids := shared[g.rng.IntN(len(shared))]
			context := 0 // unshared tokens of the previous prompt beyond its shared whole blocks
			turns := 1 + g.rng.IntN(2*o.Turns-1)
			tt := t
			s := g.session()
			for k := 0; k < turns; k++ {
				if k > 0 {
					tt += g.gap(o.ThinkMs)
				}
				out := g.around(o.OutputTokens)
				r := g.request(tt, ids, context+g.around(o.UserTokens), out, s)
				reqs = append(reqs, r)
				// The next turn resends this prompt (its full blocks shared) and this answer.
				full := r.InputTokens / TraceBlockTokens
				ids = r.HashIDs[:full:full]
				context = r.InputTokens - full*TraceBlockTokens + out
			}
		}
		sortByArrival(reqs)
		reqs = reqs[:o.Requests]
	case WorkloadFanout:
		t := 0.0
		for task := 0; len(reqs) < o.Requests; task++ {
			if task > 0 {
				t += g.gap(meanGap * float64(o.Siblings))
			}
			first := g.request(t, shared[g.rng.IntN(len(shared))], g.around(o.UserTokens), g.around(o.OutputTokens), g.session())
			reqs = append(reqs, first)
			for k := 1; k < o.Siblings && len(reqs) < o.Requests; k++ {
				sib := first
				sib.OutputTokens = g.around(o.OutputTokens)
				reqs = append(reqs, sib)
			}
		}
	}
	return reqs
}

// renumber makes ids dense from 0 in first-seen order (the Mooncake convention), sharing unchanged.
// Every request gets its own id slice.
func renumber(reqs []Request) {
	ids := map[uint64]uint64{}
	for i := range reqs {
		out := make([]uint64, len(reqs[i].HashIDs))
		for j, id := range reqs[i].HashIDs {
			n, ok := ids[id]
			if !ok {
				n = uint64(len(ids))
				ids[id] = n
			}
			out[j] = n
		}
		reqs[i].HashIDs = out
	}
}
