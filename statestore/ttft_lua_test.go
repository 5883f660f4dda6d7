package statestore

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/luascripts"
)

// TestTTFTLuaBitIdentical runs lib.lua's TT.update and TT.calibrate-style Observe (TT.init when the
// worker has no sample) in a real Redis on states and observations Go's TTFTCalibration also folds,
// edge cases included (non-finite and non-positive inputs, corrupted P, huge and tiny ratios, clamped
// steps), and requires the very same float64 bits.
func TestTTFTLuaBitIdentical(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// ARGV: r1, r2, then per case 6 state numbers, a pool state's 6, x1, x2, y (special values by name). The body
	// runs as the library runs an operation (WrapBody: its locals in a function of their own), not after the
	// prelude in its main chunk, where Lua 5.1's 200 locals left it a few to spare.
	body := `
local function num(s)
  if s == 'nan' then return 0 / 0 elseif s == 'inf' then return 1 / 0 elseif s == '-inf' then return -1 / 0 end
  return tonumber(s)
end
local function f17(x) return string.format('%.17g', x) end
local r1, r2 = num(ARGV[1]), num(ARGV[2])
local out = {}
for a = 3, #ARGV, 15 do
  local w, p = {}, {}
  for j = 0, 5 do w[j + 1] = num(ARGV[a + j]); p[j + 1] = num(ARGV[a + 6 + j]) end
  local x1, x2, y = num(ARGV[a + 12]), num(ARGV[a + 13]), num(ARGV[a + 14])
  if w[6] <= 0 then w = TT.init(r1, r2, p[1], p[2]) end
  local nw = TT.update(r1, r2, w, x1, x2, y)
  local np = nw and (TT.update(r1, r2, p, x1, x2, y) or p) or p
  local row = {nw and '1' or '0'}
  for j = 1, 6 do row[#row + 1] = f17((nw or w)[j]) end
  for j = 1, 6 do row[#row + 1] = f17(np[j]) end
  out[#out + 1] = row
end
return out
`
	rng := rand.New(rand.NewPCG(13, 7))
	cal := TTFTCalibration{Ref: TTFTCoeffs{PrefillRate: 38861.5, DecodeCoeff: 6.4e-7}}.WithDefaults()
	specials := []float64{math.NaN(), math.Inf(1), math.Inf(-1), 0, -1, 1e-300, 1e300, 5e-324}
	pick := func(normal func() float64) float64 {
		if rng.IntN(12) == 0 {
			return specials[rng.IntN(len(specials))]
		}
		return normal()
	}
	state := func() TTFTState {
		if rng.IntN(5) == 0 {
			return TTFTState{} // not calibrated yet
		}
		s := cal.Init(TTFTCoeffs{PrefillRate: cal.Ref.PrefillRate * math.Exp(rng.NormFloat64()*2), DecodeCoeff: cal.Ref.DecodeCoeff * math.Exp(rng.NormFloat64()*2)})
		s.P11, s.P22 = pick(func() float64 { return rng.Float64() * 2000 }), pick(func() float64 { return rng.Float64() * 2000 })
		s.P12 = pick(func() float64 { return (rng.Float64() - 0.5) * 100 })
		s.Samples = float64(1 + rng.IntN(300))
		return s
	}
	fs := func(v float64) string {
		switch {
		case math.IsNaN(v):
			return "nan"
		case math.IsInf(v, 1):
			return "inf"
		case math.IsInf(v, -1):
			return "-inf"
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	type tcase struct {
		w, p TTFTState
		o    TTFTObservation
	}
	var cases []tcase
	args := []string{fs(cal.Ref.PrefillRate), fs(cal.Ref.DecodeCoeff)}
	for len(cases) < 3000 {
		tc := tcase{w: state(), p: state(), o: TTFTObservation{
			PrefillTokens: pick(func() float64 { return float64(rng.IntN(40000)) }),
			DecodeBlocks:  pick(func() float64 { return float64(rng.IntN(200000)) }),
			MeasuredS:     pick(func() float64 { return math.Exp(rng.NormFloat64()*2) / 4 }),
		}}
		if tc.p.Samples == 0 {
			tc.p = cal.Init(cal.Ref) // the pool's fit is never "absent" once read (TT.pool)
		}
		cases = append(cases, tc)
		for _, s := range []TTFTState{tc.w, tc.p} {
			args = append(args, fs(s.PrefillRate), fs(s.DecodeCoeff), fs(s.P11), fs(s.P12), fs(s.P22), fs(s.Samples))
		}
		args = append(args, fs(tc.o.PrefillTokens), fs(tc.o.DecodeBlocks), fs(tc.o.MeasuredS))
	}
	res, err := c.Do(context.Background(), c.B().Eval().Script(luascripts.Prelude()+"\n"+luascripts.WrapBody(body)).Numkeys(0).Arg(args...).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for i, tc := range cases {
		row, _ := res[i].AsStrSlice()
		w, p, ok := cal.Observe(tc.w, tc.p, tc.o)
		if !ok && tc.w.Samples <= 0 {
			w = cal.Init(tc.p.TTFTCoeffs) // Lua reports the worker it tried to update
		}
		want := []float64{w.PrefillRate, w.DecodeCoeff, w.P11, w.P12, w.P22, w.Samples, p.PrefillRate, p.DecodeCoeff, p.P11, p.P12, p.P22, p.Samples}
		if (row[0] == "1") != ok {
			t.Fatalf("case %d %+v: Lua used %s, Go %v", i, tc, row[0], ok)
		}
		if ok {
			used++
		}
		for j, v := range want {
			if math.IsNaN(v) && (row[1+j] == "nan" || row[1+j] == "-nan") { // an unused sample's state, as given
				continue
			}
			got, err := strconv.ParseFloat(row[1+j], 64)
			if err != nil || math.Float64bits(got) != math.Float64bits(v) {
				t.Fatalf("case %d %+v: field %d Lua %s, Go %v (%v)", i, tc, j, row[1+j], v, err)
			}
		}
	}
	if used < len(cases)/2 {
		t.Fatalf("only %d of %d samples used: the cases are mostly rejections", used, len(cases))
	}
	t.Logf("%d cases, %d samples used, bit-identical", len(cases), used)
}
