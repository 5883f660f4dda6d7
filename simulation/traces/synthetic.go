package traces

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// SyntheticOptions shapes the prefix tree that SyntheticPrefixes gives to requests without prefix
// information. A zero field takes its default.
type SyntheticOptions struct {
	// Seed makes the tree reproducible: the same requests and options give the same ids. Default 0.
	Seed uint64
	// Apps is the number of applications, each with its own system prompt. Default 64.
	Apps int
	// AppZipfExponent s: application k (0-based) is drawn with probability ∝ 1/(k+1)^s, so a few apps
	// take most of the traffic. Default 1.0 (the top app of 64 gets ~21 % of requests).
	AppZipfExponent float64
	// SystemPromptBlocksMin and SystemPromptBlocksMax bound each app's system prompt, in 512-token trace
	// blocks; each app draws its length uniformly in [min, max] once. Defaults 1 and 4 (512–2048 tokens).
	SystemPromptBlocksMin int
	SystemPromptBlocksMax int
	// ContinueProbability is the chance, in [0, 1], that a request tries to continue one of its app's
	// open conversations rather than start a new one. Default 0.5.
	ContinueProbability float64
	// SingleTurn disables conversations (every request starts a new one); ContinueProbability is ignored.
	SingleTurn bool
	// MaxOpenConversations bounds the conversations per app that can still be continued; the oldest
	// one is forgotten first. Default 64.
	MaxOpenConversations int
}

func (o SyntheticOptions) withDefaults() SyntheticOptions {
	if o.Apps == 0 {
		o.Apps = 64
	}
	if o.AppZipfExponent == 0 {
		o.AppZipfExponent = 1.0
	}
	if o.SystemPromptBlocksMin == 0 {
		o.SystemPromptBlocksMin = 1
	}
	if o.SystemPromptBlocksMax == 0 {
		o.SystemPromptBlocksMax = max(4, o.SystemPromptBlocksMin)
	}
	if o.ContinueProbability == 0 {
		o.ContinueProbability = 0.5
	}
	if o.MaxOpenConversations == 0 {
		o.MaxOpenConversations = 64
	}
	return o
}

// Validate reports the first invalid field (after defaults are applied).
func (o SyntheticOptions) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Apps < 1:
		return fmt.Errorf("apps %d < 1", o.Apps)
	case math.IsNaN(o.AppZipfExponent) || math.IsInf(o.AppZipfExponent, 0) || o.AppZipfExponent < 0:
		return fmt.Errorf("app zipf exponent %v must be finite and >= 0", o.AppZipfExponent)
	case o.SystemPromptBlocksMin < 0 || o.SystemPromptBlocksMax < o.SystemPromptBlocksMin:
		return fmt.Errorf("system prompt blocks [%d, %d] must satisfy 0 <= min <= max",
			o.SystemPromptBlocksMin, o.SystemPromptBlocksMax)
	case math.IsNaN(o.ContinueProbability) || o.ContinueProbability < 0 || o.ContinueProbability > 1:
		return fmt.Errorf("continue probability %v must be in [0, 1]", o.ContinueProbability)
	case o.MaxOpenConversations < 1:
		return fmt.Errorf("max open conversations %d < 1", o.MaxOpenConversations)
	}
	return nil
}

// conversation is an open chat that a later request may continue.
type conversation struct {
	session int
	ids     []uint64 // hash ids of the full trace blocks of its last prompt
	context int      // tokens a continuation must exceed: last prompt + last answer
}

// app is one application: a system prompt (ids allocated on first use) and its open conversations.
type app struct {
	systemBlocks int
	systemIDs    []uint64
	open         []*conversation // oldest first
}

// SyntheticPrefixes returns copies of reqs, in the same order, with synthetic HashIDs and Session set
// (reqs is not modified; existing ids are replaced). The tree models chat traffic of many apps:
//
//  1. Each request belongs to an app, drawn Zipf-like (AppZipfExponent). Every app has a fixed system
//     prompt of SystemPromptBlocks{Min,Max} trace blocks, shared by all its requests.
//  2. With ContinueProbability, a request continues a conversation of its app: one drawn uniformly
//     among the app's open conversations whose context (last prompt + last answer) is shorter than
//     the request's prompt. It then shares all full blocks of that conversation's last prompt, as a
//     chat turn resends the history. If none fits, it starts a new conversation.
//  3. A new conversation shares the system prompt, cut to the request's full blocks.
//  4. All other blocks, and every partial last block, get fresh ids.
//
// Sharing is quantised to whole 512-token trace blocks, as in the Mooncake traces. Like them, ids are
// dense, numbered from 0 in first-seen order, and form a clean tree (an id always has the same parent
// and length). Deterministic per Seed: one PCG stream drives every draw.
func SyntheticPrefixes(reqs []Request, opt SyntheticOptions) ([]Request, error) {
	if err := opt.Validate(); err != nil {
		return nil, fmt.Errorf("traces: synthetic prefixes: %w", err)
	}
	opt = opt.withDefaults()
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5eed_cafe_f00d_d00d))
	zipf := zipfCDF(opt.Apps, opt.AppZipfExponent)
	apps := make([]app, opt.Apps)
	var nextID uint64
	fresh := func() uint64 { nextID++; return nextID - 1 }
	sessions := 0

	out := make([]Request, len(reqs))
	fits := make([]int, 0, opt.MaxOpenConversations)
	for i, r := range reqs {
		a := &apps[sort.SearchFloat64s(zipf, rng.Float64()*zipf[len(zipf)-1])]
		if a.systemIDs == nil {
			a.systemBlocks = opt.SystemPromptBlocksMin + rng.IntN(opt.SystemPromptBlocksMax-opt.SystemPromptBlocksMin+1)
			a.systemIDs = make([]uint64, 0, a.systemBlocks)
		}
		full := r.InputTokens / TraceBlockTokens
		ids := make([]uint64, 0, traceBlocks(r.InputTokens))

		var conv *conversation
		if !opt.SingleTurn && rng.Float64() < opt.ContinueProbability {
			fits = fits[:0]
			for j, c := range a.open {
				if c.context < r.InputTokens {
					fits = append(fits, j)
				}
			}
			if len(fits) > 0 {
				j := fits[rng.IntN(len(fits))]
				conv = a.open[j]
				a.open = append(a.open[:j], a.open[j+1:]...) // re-appended below as the newest
				ids = append(ids, conv.ids...)
			}
		}
		if conv == nil {
			sessions++
			conv = &conversation{session: sessions}
			for b := range min(a.systemBlocks, full) {
				if b == len(a.systemIDs) {
					a.systemIDs = append(a.systemIDs, fresh())
				}
				ids = append(ids, a.systemIDs[b])
			}
		}
		for len(ids) < traceBlocks(r.InputTokens) {
			ids = append(ids, fresh())
		}
		conv.ids = ids[:full:full]
		conv.context = r.InputTokens + r.OutputTokens
		if len(a.open) == opt.MaxOpenConversations {
			a.open = append(a.open[:0], a.open[1:]...)
		}
		a.open = append(a.open, conv)

		r.HashIDs = ids
		r.Session = conv.session
		out[i] = r
	}
	return out, nil
}

// zipfCDF returns the cumulative weights Σ_{j<=k} 1/(j+1)^s, k = 0..n-1 (unnormalised).
func zipfCDF(n int, s float64) []float64 {
	if n < 1 {
		panic(errors.New("traces: zipf over no items"))
	}
	cdf := make([]float64, n)
	sum := 0.0
	for k := range cdf {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	return cdf
}
