package statestore

import (
	"errors"
	"fmt"
	"math"
)

// The TTFT cost model (SPEC §6.6) and its online calibration, transport-free. The stores compute the
// same arithmetic in Lua, so every function here uses only + − × ÷ and comparisons on float64: no
// math.Pow/Exp/Log/Sqrt, no FMA. Go may fuse x*y+z into one FMA instruction on some architectures
// (arm64, ppc64le, s390x, amd64 with GOAMD64=v3), which rounds once instead of twice and would differ
// from Lua in the last bit; the spec forbids fusion across an explicit conversion, so every product
// that meets an addition is written float64(x*y). TestTTFTCalibrationGolden pins the bits.
//
// What a store needs to use it (simulation/sim/ttft.go does exactly this in the simulator):
//   - pool: cost_model, and the default coefficients (TTFTCalibration.Ref; every worker starts there);
//   - per worker and per pool: TTFTState's six numbers (prefill_rate, decode_coeff, p11, p12, p22,
//     samples); a worker predicts with EffectiveTTFT (the pool's until its first sample) and is updated by
//     Observe;
//   - per lease, written at the decision: the features x1 = active_prefill_tokens + uncached_tokens and
//     x2 = active_decode_blocks of the chosen worker (before booking), and the decision time in ms;
//   - at prefill_done: measured = (now_ms − decision_ms) / 1000, then Observe on the lease's worker, once
//     (prefill_done is idempotent; a lease released by done or expiry without prefill_done calibrates
//     nothing). Lua returns the floats as strings with %.17g (tostring keeps 14 digits).

// TTFTCoeffs are one worker's cost coefficients.
type TTFTCoeffs struct {
	// PrefillRate is how many prompt tokens the worker computes per second, tokens/s (> 0).
	PrefillRate float64 `json:"prefill_rate"`
	// DecodeCoeff is the time one active decode block adds to a first token, s/block (>= 0).
	DecodeCoeff float64 `json:"decode_coeff"`
}

// TTFTTerms are a candidate's predicted time to first token, seconds, by term (SPEC §6.6).
type TTFTTerms struct {
	// QueueS = active_prefill_tokens / prefill_rate: prefill already booked on the worker.
	QueueS float64 `json:"queue_s"`
	// OwnS = uncached_tokens / prefill_rate: this request's prompt minus its cached prefix.
	OwnS float64 `json:"own_s"`
	// InterferenceS = decode_coeff · active_decode_blocks: decode steps sharing the GPU.
	InterferenceS float64 `json:"interference_s"`
}

// Cost is the predicted TTFT, seconds: queue + own + interference (added in that order).
func (t TTFTTerms) Cost() float64 { return (t.QueueS + t.OwnS) + t.InterferenceS }

// PredictTTFT returns the terms for a candidate with activePrefillTokens booked prefill tokens,
// activeDecodeBlocks booked decode blocks, and a request needing uncachedTokens of prefill. Inputs are
// counts (>= 0); c must be valid (TTFTCalibration.Clamp gives that).
func PredictTTFT(c TTFTCoeffs, activePrefillTokens, uncachedTokens, activeDecodeBlocks int64) TTFTTerms {
	return TTFTTerms{
		QueueS:        float64(activePrefillTokens) / c.PrefillRate,
		OwnS:          float64(uncachedTokens) / c.PrefillRate,
		InterferenceS: float64(c.DecodeCoeff * float64(activeDecodeBlocks)),
	}
}

// TTFTObservation is what the router learns when a request's first token arrives: the features its
// prediction used (recorded in its lease at decision time) and the measured TTFT.
type TTFTObservation struct {
	// PrefillTokens = active_prefill_tokens + uncached_tokens at decision time, tokens.
	PrefillTokens float64
	// DecodeBlocks = active_decode_blocks at decision time, blocks.
	DecodeBlocks float64
	// MeasuredS is decision to first token (prefill_done), seconds.
	MeasuredS float64
}

// TTFTState is one worker's calibration state: its coefficients, the 2×2 symmetric inverse-information
// matrix P of the least-squares fit (dimensionless, see Update), and how many samples were accepted.
// Six float64 per worker; the zero value is "not calibrated yet" (Init gives the start).
type TTFTState struct {
	TTFTCoeffs
	P11     float64 `json:"p11"`
	P12     float64 `json:"p12"`
	P22     float64 `json:"p22"`
	Samples float64 `json:"samples"`
}

// TTFTCalibration configures the online update. The reference coefficients (the pool defaults) fix the
// scale of the fit; every other field has a default (zero = default).
type TTFTCalibration struct {
	// Ref are the pool's default coefficients: every worker starts from them, and the fit works in
	// units of them (u1 = Ref.PrefillRate / PrefillRate, u2 = DecodeCoeff / Ref.DecodeCoeff, so a
	// calibrated worker has u ≈ 1 when the defaults were right). Both must be > 0 and finite.
	Ref TTFTCoeffs
	// Forgetting λ ∈ [0.5, 1]: the weight of a sample halves after ln 2 / (1 − λ) newer ones. Default
	// 0.98 (half-life ~34 samples).
	Forgetting float64
	// InitialP is P's diagonal at the start (and after a reset), dimensionless. Larger = the first
	// samples move the coefficients more. Default 10.
	InitialP float64
	// MaxP bounds P's diagonal: with features that never vary, forgetting alone would grow P without
	// bound (windup). Default 1000.
	MaxP float64
	// MaxStep bounds one update: each of u1, u2 moves by at most a factor MaxStep (> 1). Default 2.
	MaxStep float64
	// MinFactor and MaxFactor bound the coefficients relative to Ref: u1, u2 ∈ [MinFactor, MaxFactor].
	// Defaults 1/64 and 64.
	MinFactor, MaxFactor float64
}

// Defaults of TTFTCalibration.
const (
	DefaultTTFTForgetting = 0.98
	DefaultTTFTInitialP   = 10
	DefaultTTFTMaxP       = 1000
	DefaultTTFTMaxStep    = 2
	DefaultTTFTMinFactor  = 1.0 / 64
	DefaultTTFTMaxFactor  = 64
)

// ErrTTFTCalibration is returned by TTFTCalibration.Validate.
var ErrTTFTCalibration = errors.New("invalid TTFT calibration")

// WithDefaults returns c with every zero field set to its default.
func (c TTFTCalibration) WithDefaults() TTFTCalibration {
	if c.Forgetting == 0 {
		c.Forgetting = DefaultTTFTForgetting
	}
	if c.InitialP == 0 {
		c.InitialP = DefaultTTFTInitialP
	}
	if c.MaxP == 0 {
		c.MaxP = DefaultTTFTMaxP
	}
	if c.MaxStep == 0 {
		c.MaxStep = DefaultTTFTMaxStep
	}
	if c.MinFactor == 0 {
		c.MinFactor = DefaultTTFTMinFactor
	}
	if c.MaxFactor == 0 {
		c.MaxFactor = DefaultTTFTMaxFactor
	}
	return c
}

// Validate reports the first invalid field, after defaults.
func (c TTFTCalibration) Validate() error {
	c = c.WithDefaults()
	bad := func(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }
	switch {
	case bad(c.Ref.PrefillRate) || c.Ref.PrefillRate <= 0:
		return fmt.Errorf("%w: reference prefill_rate %v must be > 0 and finite", ErrTTFTCalibration, c.Ref.PrefillRate)
	case bad(c.Ref.DecodeCoeff) || c.Ref.DecodeCoeff <= 0:
		return fmt.Errorf("%w: reference decode_coeff %v must be > 0 and finite", ErrTTFTCalibration, c.Ref.DecodeCoeff)
	case bad(c.Forgetting) || c.Forgetting < 0.5 || c.Forgetting > 1:
		return fmt.Errorf("%w: forgetting %v must be in [0.5, 1]", ErrTTFTCalibration, c.Forgetting)
	case bad(c.InitialP) || c.InitialP <= 0 || bad(c.MaxP) || c.MaxP < c.InitialP:
		return fmt.Errorf("%w: initial P %v and max P %v must satisfy 0 < initial <= max", ErrTTFTCalibration, c.InitialP, c.MaxP)
	case bad(c.MaxStep) || c.MaxStep <= 1:
		return fmt.Errorf("%w: max step %v must be > 1", ErrTTFTCalibration, c.MaxStep)
	case bad(c.MinFactor) || bad(c.MaxFactor) || c.MinFactor <= 0 || c.MaxFactor < 1 || c.MinFactor > 1:
		return fmt.Errorf("%w: factor bounds [%v, %v] must satisfy 0 < min <= 1 <= max", ErrTTFTCalibration, c.MinFactor, c.MaxFactor)
	}
	return nil
}

// Init is a worker's starting state: the coefficients start (for instance the pool defaults, or values
// known to be off in a test), P = InitialP·I, no samples. start is clamped to the bounds.
func (c TTFTCalibration) Init(start TTFTCoeffs) TTFTState {
	return TTFTState{TTFTCoeffs: c.Clamp(start), P11: c.InitialP, P22: c.InitialP}
}

// Clamp returns k with both coefficients inside the bounds (non-finite values become Ref's).
func (c TTFTCalibration) Clamp(k TTFTCoeffs) TTFTCoeffs {
	u1, u2 := c.Ref.PrefillRate/k.PrefillRate, k.DecodeCoeff/c.Ref.DecodeCoeff
	u1, u2 = c.clampU(u1), c.clampU(u2)
	return TTFTCoeffs{PrefillRate: c.Ref.PrefillRate / u1, DecodeCoeff: float64(u2 * c.Ref.DecodeCoeff)}
}

// clampU bounds a relative coefficient to [MinFactor, MaxFactor]; NaN becomes 1 (the reference).
func (c TTFTCalibration) clampU(u float64) float64 {
	switch {
	case !(u == u) || u-u != 0: // NaN or ±Inf, without math.IsNaN (the Lua port compares the same way)
		if u > 0 {
			return c.MaxFactor
		}
		if u < 0 {
			return c.MinFactor
		}
		return 1
	case u < c.MinFactor:
		return c.MinFactor
	case u > c.MaxFactor:
		return c.MaxFactor
	}
	return u
}

// Update folds one observation into a worker's state and returns the new state and whether the sample
// was used. c must have its defaults applied and be valid (Validate); s should come from Init or an
// earlier Update. A sample with a non-finite or negative feature, a non-finite or non-positive
// measured TTFT, or no feature at all (nothing predicted) is ignored: the state is returned unchanged.
//
// The step is recursive least squares with forgetting on the relative error (weighted least squares
// with weights 1/measured², so a 10 s TTFT does not outweigh a hundred 0.1 s ones):
//
//	z1 = PrefillTokens / Ref.PrefillRate / y,   z2 = DecodeBlocks · Ref.DecodeCoeff / y   (y = MeasuredS)
//	u  = (Ref.PrefillRate / PrefillRate, DecodeCoeff / Ref.DecodeCoeff)      so that prediction/y = u·z
//	e  = 1 − u·z                     (the relative error of the prediction, bounded to [−1, 1])
//	Pz = P z,  d = λ + z·Pz,  k = Pz / d
//	u' = u + k e, each component kept within a factor MaxStep of u, then within [MinFactor, MaxFactor]
//	P' = (P − k Pzᵀ) / λ, diagonal kept within (0, MaxP]; P12 dropped to 0 if P12² ≥ P11·P22 (P must stay
//	     positive definite; a rounding loss of definiteness would otherwise flip the gain's sign)
//
// The relative error is bounded so that one stalled request (a TTFT 100× its prediction, say after a
// preemption) moves the fit no more than a prediction off by 100 %. State is six float64 per worker.
func (c TTFTCalibration) Update(s TTFTState, o TTFTObservation) (TTFTState, bool) {
	y, x1, x2 := o.MeasuredS, o.PrefillTokens, o.DecodeBlocks
	if !finite(y) || !finite(x1) || !finite(x2) || y <= 0 || x1 < 0 || x2 < 0 || x1+x2 == 0 {
		return s, false
	}
	if !finite(s.P11) || !finite(s.P12) || !finite(s.P22) || s.P11 <= 0 || s.P22 <= 0 {
		s.P11, s.P12, s.P22 = c.InitialP, 0, c.InitialP // a corrupted or zero state restarts the fit
	}
	z1 := x1 / c.Ref.PrefillRate / y
	z2 := float64(x2*c.Ref.DecodeCoeff) / y
	if !finite(z1) || !finite(z2) {
		return s, false
	}
	k := c.Clamp(s.TTFTCoeffs)
	u1, u2 := c.Ref.PrefillRate/k.PrefillRate, k.DecodeCoeff/c.Ref.DecodeCoeff
	e := 1 - (float64(u1*z1) + float64(u2*z2))
	if e > 1 {
		e = 1
	} else if e < -1 {
		e = -1
	}
	pz1 := float64(s.P11*z1) + float64(s.P12*z2)
	pz2 := float64(s.P12*z1) + float64(s.P22*z2)
	d := c.Forgetting + (float64(z1*pz1) + float64(z2*pz2))
	if !(d > 0) || !finite(d) {
		return s, false
	}
	k1, k2 := pz1/d, pz2/d
	n1 := c.clampU(bounded(u1+float64(k1*e), u1, c.MaxStep))
	n2 := c.clampU(bounded(u2+float64(k2*e), u2, c.MaxStep))
	p11 := (s.P11 - float64(k1*pz1)) / c.Forgetting
	p12 := (s.P12 - float64(k1*pz2)) / c.Forgetting
	p22 := (s.P22 - float64(k2*pz2)) / c.Forgetting
	p11, p22 = c.boundP(p11), c.boundP(p22)
	if !finite(p12) || float64(p12*p12) >= float64(p11*p22) {
		p12 = 0
	}
	return TTFTState{TTFTCoeffs: TTFTCoeffs{PrefillRate: c.Ref.PrefillRate / n1, DecodeCoeff: float64(n2 * c.Ref.DecodeCoeff)},
		P11: p11, P12: p12, P22: p22, Samples: s.Samples + 1}, true
}

// EffectiveTTFT returns the coefficients a worker predicts with: its own once it has taken a sample, else
// the pool's. A worker without samples thus inherits the fleet's calibration: a start that is too
// pessimistic cannot starve it of the traffic whose first tokens would correct it.
func EffectiveTTFT(worker, pool TTFTState) TTFTCoeffs {
	if worker.Samples > 0 {
		return worker.TTFTCoeffs
	}
	return pool.TTFTCoeffs
}

// Observe folds one observation of a worker into the worker's state and the pool's (the pool's state
// is fitted on every worker's samples, the fleet's average). A worker's first used sample starts from
// the pool's coefficients as they were before it, with P = InitialP·I. It returns the new states and
// whether the sample was used (Update's rules; both states unchanged when it was not).
func (c TTFTCalibration) Observe(worker, pool TTFTState, o TTFTObservation) (TTFTState, TTFTState, bool) {
	if worker.Samples <= 0 {
		worker = c.Init(pool.TTFTCoeffs)
	}
	w, ok := c.Update(worker, o)
	if !ok {
		return worker, pool, false
	}
	p, _ := c.Update(pool, o)
	return w, p, true
}

// boundP keeps a diagonal element of P in [InitialP/1e6, MaxP] (NaN → InitialP).
func (c TTFTCalibration) boundP(p float64) float64 {
	lo := c.InitialP / 1e6
	switch {
	case !(p == p):
		return c.InitialP
	case p < lo:
		return lo
	case p > c.MaxP:
		return c.MaxP
	}
	return p
}

// bounded keeps v within a factor step of u (u > 0, step > 1).
func bounded(v, u, step float64) float64 {
	lo, hi := u/step, float64(u*step)
	switch {
	case !(v == v) || v < lo:
		return lo
	case v > hi:
		return hi
	}
	return v
}

// finite reports whether v is neither NaN nor ±Inf, by comparisons only (v − v is NaN for ±Inf).
func finite(v float64) bool { return v-v == 0 }
