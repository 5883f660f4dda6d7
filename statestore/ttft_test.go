package statestore

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// truthTTFT is the synthetic truth the calibration tests fit: rate 40 000 tokens/s, 2 µs per block.
var truthTTFT = TTFTCoeffs{PrefillRate: 40000, DecodeCoeff: 2e-6}

func testCalibration() TTFTCalibration {
	return TTFTCalibration{Ref: TTFTCoeffs{PrefillRate: 20000, DecodeCoeff: 1e-6}}.WithDefaults()
}

// synthObs draws one observation of the truth: 0–20 k prefill tokens, 0–50 k decode blocks, measured
// TTFT = the linear model times a noise factor in [1 − noise, 1 + noise].
func synthObs(rng *rand.Rand, noise float64) TTFTObservation {
	x1 := float64(rng.IntN(20000))
	x2 := float64(rng.IntN(50000))
	t := PredictTTFT(truthTTFT, 0, int64(x1), int64(x2)).Cost()
	return TTFTObservation{PrefillTokens: x1, DecodeBlocks: x2, MeasuredS: t * (1 + noise*(2*rng.Float64()-1))}
}

func relErr(got, want float64) float64 { return math.Abs(got/want - 1) }

func TestTTFTCalibrationConverges(t *testing.T) {
	c := testCalibration()
	for _, start := range []TTFTCoeffs{
		{PrefillRate: truthTTFT.PrefillRate * 4, DecodeCoeff: truthTTFT.DecodeCoeff * 4},
		{PrefillRate: truthTTFT.PrefillRate / 4, DecodeCoeff: truthTTFT.DecodeCoeff / 4},
		{PrefillRate: truthTTFT.PrefillRate * 4, DecodeCoeff: truthTTFT.DecodeCoeff / 4},
		{PrefillRate: truthTTFT.PrefillRate / 4, DecodeCoeff: truthTTFT.DecodeCoeff * 4},
	} {
		for _, noise := range []float64{0, 0.1} {
			t.Run(fmt.Sprintf("start=%v/noise=%v", start, noise), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, 9))
				s := c.Init(start)
				for range 200 {
					var ok bool
					s, ok = c.Update(s, synthObs(rng, noise))
					if !ok {
						t.Fatal("a valid sample was refused")
					}
				}
				if s.Samples != 200 {
					t.Fatalf("samples %v, want 200", s.Samples)
				}
				if e := relErr(s.PrefillRate, truthTTFT.PrefillRate); e > 0.15 {
					t.Errorf("prefill_rate %.0f, truth %.0f (off by %.1f %%)", s.PrefillRate, truthTTFT.PrefillRate, 100*e)
				}
				if e := relErr(s.DecodeCoeff, truthTTFT.DecodeCoeff); e > 0.15 {
					t.Errorf("decode_coeff %.3g, truth %.3g (off by %.1f %%)", s.DecodeCoeff, truthTTFT.DecodeCoeff, 100*e)
				}
				// Predictions on fresh noiseless samples: within 15 %.
				worst := 0.0
				for range 100 {
					o := synthObs(rng, 0)
					p := PredictTTFT(s.TTFTCoeffs, 0, int64(o.PrefillTokens), int64(o.DecodeBlocks)).Cost()
					worst = max(worst, relErr(p, o.MeasuredS))
				}
				if worst > 0.15 {
					t.Errorf("worst prediction off by %.1f %%", 100*worst)
				}
			})
		}
	}
}

func TestTTFTCalibrationBounds(t *testing.T) {
	c := testCalibration()
	s := c.Init(c.Ref)
	// One absurd sample moves each coefficient by at most MaxStep.
	n, ok := c.Update(s, TTFTObservation{PrefillTokens: 1000, DecodeBlocks: 1000, MeasuredS: 1e6})
	if !ok {
		t.Fatal("refused")
	}
	if n.PrefillRate < s.PrefillRate/c.MaxStep*(1-1e-12) || n.DecodeCoeff > s.DecodeCoeff*c.MaxStep*(1+1e-12) {
		t.Fatalf("one step moved too far: %+v → %+v", s.TTFTCoeffs, n.TTFTCoeffs)
	}
	// Many absurd samples, either way: the coefficients stay in [Ref/64, Ref·64], P stays bounded.
	for _, y := range []float64{1e9, 1e-9} {
		s := c.Init(c.Ref)
		for i := range 500 {
			s, _ = c.Update(s, TTFTObservation{PrefillTokens: float64(i % 7 * 1000), DecodeBlocks: float64(i % 5 * 100), MeasuredS: y})
			lo, hi := c.Ref.PrefillRate*c.MinFactor*(1-1e-12), c.Ref.PrefillRate*c.MaxFactor*(1+1e-12)
			if s.PrefillRate < lo || s.PrefillRate > hi {
				t.Fatalf("y=%v sample %d: prefill_rate %v out of [%v, %v]", y, i, s.PrefillRate, lo, hi)
			}
			lo, hi = c.Ref.DecodeCoeff*c.MinFactor*(1-1e-12), c.Ref.DecodeCoeff*c.MaxFactor*(1+1e-12)
			if s.DecodeCoeff < lo || s.DecodeCoeff > hi {
				t.Fatalf("y=%v sample %d: decode_coeff %v out of [%v, %v]", y, i, s.DecodeCoeff, lo, hi)
			}
			if !(s.P11 > 0 && s.P11 <= c.MaxP && s.P22 > 0 && s.P22 <= c.MaxP && s.P12*s.P12 < s.P11*s.P22) {
				t.Fatalf("y=%v sample %d: P not bounded positive definite: %+v", y, i, s)
			}
		}
	}
	// Only prefill ever varies (no decode load): P22 winds up to MaxP, not to infinity, and the fit
	// still converges on the prefill rate.
	s = c.Init(TTFTCoeffs{PrefillRate: 10000, DecodeCoeff: 1e-6})
	for i := range 300 {
		x := float64(1000 + i%10*1000)
		s, _ = c.Update(s, TTFTObservation{PrefillTokens: x, MeasuredS: x / truthTTFT.PrefillRate})
	}
	if e := relErr(s.PrefillRate, truthTTFT.PrefillRate); e > 0.01 || s.P22 > c.MaxP {
		t.Fatalf("prefill-only: rate %.0f (off %.2f %%), P22 %v", s.PrefillRate, 100*e, s.P22)
	}
	// Init clamps a start outside the bounds.
	if k := c.Init(TTFTCoeffs{PrefillRate: 1, DecodeCoeff: 1}).TTFTCoeffs; k.PrefillRate != c.Ref.PrefillRate/c.MaxFactor || k.DecodeCoeff != c.Ref.DecodeCoeff*c.MaxFactor {
		t.Fatalf("Init did not clamp: %+v", k)
	}
}

func TestTTFTCalibrationIgnoresBadInput(t *testing.T) {
	c := testCalibration()
	s := c.Init(c.Ref)
	s, _ = c.Update(s, TTFTObservation{PrefillTokens: 5000, DecodeBlocks: 100, MeasuredS: 0.2})
	nan, inf := math.NaN(), math.Inf(1)
	for _, o := range []TTFTObservation{
		{PrefillTokens: nan, DecodeBlocks: 1, MeasuredS: 1},
		{PrefillTokens: 1, DecodeBlocks: nan, MeasuredS: 1},
		{PrefillTokens: 1, DecodeBlocks: 1, MeasuredS: nan},
		{PrefillTokens: inf, DecodeBlocks: 1, MeasuredS: 1},
		{PrefillTokens: 1, DecodeBlocks: -inf, MeasuredS: 1},
		{PrefillTokens: 1, DecodeBlocks: 1, MeasuredS: inf},
		{PrefillTokens: -1, DecodeBlocks: 1, MeasuredS: 1},
		{PrefillTokens: 1, DecodeBlocks: -1, MeasuredS: 1},
		{PrefillTokens: 1, DecodeBlocks: 1, MeasuredS: 0},
		{PrefillTokens: 1, DecodeBlocks: 1, MeasuredS: -1},
		{PrefillTokens: 0, DecodeBlocks: 0, MeasuredS: 1},
		{PrefillTokens: 1e308, DecodeBlocks: 1e308, MeasuredS: 1e-308}, // features overflow to +Inf
	} {
		n, ok := c.Update(s, o)
		if ok || n != s {
			t.Errorf("%+v: used (%v) or changed the state: %+v → %+v", o, ok, s, n)
		}
	}
	// A corrupted state (NaN in P or the coefficients) restarts cleanly instead of spreading NaN.
	bad := s
	bad.P11, bad.PrefillRate, bad.DecodeCoeff = nan, nan, inf
	n, ok := c.Update(bad, TTFTObservation{PrefillTokens: 5000, DecodeBlocks: 100, MeasuredS: 0.2})
	if !ok || !finite(n.PrefillRate) || !finite(n.DecodeCoeff) || !finite(n.P11) || !finite(n.P12) || !finite(n.P22) {
		t.Fatalf("corrupted state not recovered: %+v", n)
	}
}

func TestTTFTCalibrationValidate(t *testing.T) {
	good := TTFTCalibration{Ref: TTFTCoeffs{PrefillRate: 1, DecodeCoeff: 1}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []TTFTCalibration{
		{},
		{Ref: TTFTCoeffs{PrefillRate: 1}},
		{Ref: TTFTCoeffs{PrefillRate: math.Inf(1), DecodeCoeff: 1}},
		{Ref: good.Ref, Forgetting: 0.3},
		{Ref: good.Ref, Forgetting: 1.5},
		{Ref: good.Ref, InitialP: 10, MaxP: 5},
		{Ref: good.Ref, MaxStep: 0.5},
		{Ref: good.Ref, MinFactor: 2},
		{Ref: good.Ref, MaxFactor: 0.5},
		{Ref: good.Ref, MaxFactor: math.NaN()},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
}

// TestTTFTCalibrationGolden pins the exact bits of a fixed sequence of updates: a Lua port must
// reproduce them, and a compiler that fused a product into an FMA would change them.
func TestTTFTCalibrationGolden(t *testing.T) {
	c := testCalibration()
	s := c.Init(TTFTCoeffs{PrefillRate: 5000, DecodeCoeff: 8e-6})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		s, _ = c.Update(s, synthObs(rng, 0.2))
	}
	got := fmt.Sprintf("%016x %016x %016x %016x %016x %v", math.Float64bits(s.PrefillRate), math.Float64bits(s.DecodeCoeff),
		math.Float64bits(s.P11), math.Float64bits(s.P12), math.Float64bits(s.P22), s.Samples)
	const want = "40ca4de4a34a1857 3ebd2d246e44d890 3f91bfbe30ee313e bfb72e90e51b4d6a 3ffc63f74645dc14 50"
	if got != want {
		t.Fatalf("state bits %s, want %s (rate %v, coeff %v)", got, want, s.PrefillRate, s.DecodeCoeff)
	}
	p := PredictTTFT(s.TTFTCoeffs, 1234, 5678, 910).Cost()
	if got, want := fmt.Sprintf("%016x", math.Float64bits(p)), "3fe0794cedcb6986"; got != want {
		t.Fatalf("prediction bits %s, want %s", got, want)
	}
}

// A worker without samples predicts with the pool's coefficients and starts from them at its first
// sample; the pool's state learns from every worker.
func TestTTFTObserveInheritsPool(t *testing.T) {
	c := testCalibration()
	pool := c.Init(truthTTFT)
	pool.Samples = 50
	fresh := c.Init(TTFTCoeffs{PrefillRate: truthTTFT.PrefillRate / 4, DecodeCoeff: truthTTFT.DecodeCoeff * 4})
	if got := EffectiveTTFT(fresh, pool); got != pool.TTFTCoeffs {
		t.Fatalf("a worker without samples predicts with %+v, want the pool's %+v", got, pool.TTFTCoeffs)
	}
	o := TTFTObservation{PrefillTokens: 8000, DecodeBlocks: 1000, MeasuredS: PredictTTFT(truthTTFT, 0, 8000, 1000).Cost()}
	w, p, ok := c.Observe(fresh, pool, o)
	if !ok || w.Samples != 1 || p.Samples != 51 {
		t.Fatalf("observe: ok %v, samples %v / %v", ok, w.Samples, p.Samples)
	}
	if relErr(w.PrefillRate, truthTTFT.PrefillRate) > 1e-9 || EffectiveTTFT(w, p) != w.TTFTCoeffs {
		t.Fatalf("first sample did not start from the pool: %+v", w.TTFTCoeffs)
	}
	if _, _, ok := c.Observe(fresh, pool, TTFTObservation{MeasuredS: math.NaN()}); ok {
		t.Fatal("bad sample used")
	}
}
