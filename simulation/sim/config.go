package sim

import (
	"fmt"
	"slices"

	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/statestore"
)

// Policy names.
const (
	PolicyKV          = "kv"           // the product: core.Router over KV events
	PolicyKVApprox    = "kv-approx"    // core.Router, no events: routed prefixes indexed with a TTL
	PolicyKVPredict   = "kv-predict"   // core.Router, events + predict-on-route entries
	PolicyRoundRobin  = "round-robin"  // cache-blind: worker i mod N
	PolicyRandom      = "random"       // cache-blind: uniform (seeded)
	PolicyLeastLoaded = "least-loaded" // cache-blind: fewest active requests (ties: seeded random)
	// PolicyKVInstant is kv's core.Router and cost fed every engine's KV events at the instant its
	// block pool changes (no event delay, no batching by step): what instant events would buy. It is no
	// upper bound (kv often scores above it: a cost that follows the cache more eagerly is not always
	// better); the infinite-cache bound (Report.ReuseBound) is the hit rate no policy can beat.
	PolicyKVInstant = "kv-instant-events"
	// PolicyTTFTSim is SPEC §6.6's `ttft` cost model decided in the simulator (see ttft.go): the
	// router's index for overlap (events as kv), the load the stores will book kept by the simulator,
	// minimum predicted TTFT, per-worker coefficients calibrated at every request's first token.
	PolicyTTFTSim = "ttft-sim"
	// PolicyTTFTSimPredict is ttft-sim with predict-on-route (kv-predict's predicted entries).
	PolicyTTFTSimPredict = "ttft-sim-predict"
	// PolicyTTFT is the product's `cost_model: ttft` (SPEC §6.6): core.Router over KV events like kv, the
	// pool's cost model ttft with ttft_prefill_rate and ttft_decode_coeff = Config.TTFTStart (zero fields:
	// DefaultTTFTCoeffs), calibrated by the store at each prefill_done (the request's real first token).
	PolicyTTFT = "ttft"
	// PolicyTTFTPredict is ttft with predict-on-route (kv-predict's predicted_ttl_ms).
	PolicyTTFTPredict = "ttft-predict"
	// PolicyOracleAlias is PolicyKVInstant's former name, still accepted in Config.Policies
	// (deprecated: reports use the new name).
	PolicyOracleAlias = "oracle"
)

// AllPolicies lists every policy, in report order.
var AllPolicies = []string{PolicyKV, PolicyKVApprox, PolicyKVPredict, PolicyTTFT, PolicyTTFTPredict, PolicyTTFTSim, PolicyTTFTSimPredict,
	PolicyRoundRobin, PolicyRandom, PolicyLeastLoaded, PolicyKVInstant}

// CacheBlindPolicies are the baselines that ignore the KV caches.
var CacheBlindPolicies = []string{PolicyRoundRobin, PolicyRandom, PolicyLeastLoaded}

// usesCore reports whether a policy decides through core.Router.
func usesCore(p string) bool {
	return p == PolicyKV || p == PolicyKVApprox || p == PolicyKVPredict || p == PolicyKVInstant || p == PolicyTTFTSim ||
		p == PolicyTTFTSimPredict || p == PolicyTTFT || p == PolicyTTFTPredict
}

// DefaultPredictedTTLMs is kv-predict's predicted-entry TTL when the pool config sets none.
const DefaultPredictedTTLMs = 5000

// Config is one simulation: the fleet, the router knobs and the policies to compare.
type Config struct {
	// Workers is the number of simulated engines. Default 8.
	Workers int
	// Engine configures every engine (BlockSize must equal the workload's EngineBlock).
	Engine engine.Options
	// Pool holds the router's knobs for the core-based policies (BlockSize is set from Engine).
	// kv-predict and ttft-sim-predict use Pool.PredictedTTLMs, or DefaultPredictedTTLMs when it is 0; kv and
	// always run with it 0; kv-approx registers its workers without KV events.
	Pool statestore.PoolConfig
	// EventDelayMs delays the KV events of a step (published at the step's end) before the router
	// applies them. Default 0. kv-instant-events ignores it.
	EventDelayMs float64
	// Seed seeds the policies' random numbers (tie-breaks, softmax, random policy).
	Seed uint64
	// Policies to run (default AllPolicies); each runs on its own fleet and store, in parallel.
	// "oracle" is read as PolicyKVInstant.
	Policies []string
	// Parallel bounds the policies simulated at once (default 1 = one after another).
	Parallel int
	// NewStore opens the store of one policy's router (default statestore.NewMemory).
	NewStore func() (statestore.Store, error)
	// Timing puts wall-clock router decision times into the results (they are never reproducible).
	Timing bool
	// CheckEvents verifies that every Stored block is later Removed or still resident, and that no
	// unknown block is removed (costs a map per worker).
	CheckEvents bool
	// TTFTStart are ttft-sim's starting coefficients on every worker, and the ttft policies' pool
	// coefficients (ttft_prefill_rate, ttft_decode_coeff: where the store's calibration starts); a zero field takes
	// DefaultTTFTCoeffs' (the pool defaults the calibration is scaled by).
	TTFTStart statestore.TTFTCoeffs
	// TTFTWarmup is the number of calibration samples a worker takes before ttft-sim's predictions on
	// it count in PolicyResult.TTFTModel. Default 200.
	TTFTWarmup int
	// Progress, when set, is called with the number of requests routed so far by one policy.
	Progress func(policy string, routed int)
}

func (c Config) withDefaults() Config {
	if c.Workers == 0 {
		c.Workers = 8
	}
	c.Engine = c.Engine.WithDefaults()
	if c.Pool.BlockSize == 0 {
		c.Pool = statestore.DefaultPoolConfig(c.Engine.BlockSize)
	}
	c.Pool.BlockSize = c.Engine.BlockSize
	if len(c.Policies) == 0 {
		c.Policies = AllPolicies
	}
	if slices.Contains(c.Policies, PolicyOracleAlias) {
		c.Policies = slices.Clone(c.Policies)
		for i, p := range c.Policies {
			if p == PolicyOracleAlias {
				c.Policies[i] = PolicyKVInstant
			}
		}
	}
	if c.TTFTWarmup == 0 {
		c.TTFTWarmup = 200
	}
	if c.Parallel < 1 {
		c.Parallel = 1
	}
	if c.NewStore == nil {
		c.NewStore = func() (statestore.Store, error) { return statestore.NewMemory(), nil }
	}
	return c
}

func (c Config) validate(w *Workload) error {
	if err := c.Engine.Validate(); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	if c.Engine.BlockSize != w.EngineBlock {
		return fmt.Errorf("engine block size %d differs from the workload's %d", c.Engine.BlockSize, w.EngineBlock)
	}
	if c.Workers < 1 || c.Workers > statestore.MaxWorkersPerPool { // a pool's limit (4,096)
		return fmt.Errorf("workers %d out of [1, %d]", c.Workers, statestore.MaxWorkersPerPool)
	}
	if c.EventDelayMs < 0 || c.EventDelayMs != c.EventDelayMs {
		return fmt.Errorf("event delay %v must be >= 0", c.EventDelayMs)
	}
	if err := c.Pool.Validate(); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	seen := map[string]bool{}
	for _, p := range c.Policies {
		if !slices.Contains(AllPolicies, p) {
			return fmt.Errorf("unknown policy %q (known: %v)", p, AllPolicies)
		}
		if seen[p] {
			return fmt.Errorf("policy %q listed twice", p)
		}
		seen[p] = true
	}
	return nil
}
