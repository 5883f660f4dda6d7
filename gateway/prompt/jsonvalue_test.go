package prompt

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// plain converts a decoded value to what encoding/json (with UseNumber) gives, for comparison;
// objects become [key, value] lists to keep their order visible.
func plain(v jinja.Value) any {
	switch {
	case v.IsNone():
		return nil
	case v.IsBool():
		return v.AsBool()
	case v.IsInt():
		return float64(v.AsInt())
	case v.IsFloat():
		return v.AsFloat()
	case v.IsString():
		return v.AsString()
	case v.IsList():
		out := []any{}
		for _, it := range v.AsList().Items {
			out = append(out, plain(it))
		}
		return out
	case v.IsDict():
		out := map[string]any{}
		for _, k := range v.AsDict().Keys {
			out[k] = plain(v.AsDict().Data[k])
		}
		return out
	}
	return "?"
}

func stdPlain(data []byte) (any, error) {
	var v any
	err := json.Unmarshal(data, &v)
	return v, err
}

// FuzzDecodeJSON checks the hand-written parser against encoding/json: the same documents are
// accepted (except invalid UTF-8, which decodeJSON rejects and encoding/json replaces) and decode
// to the same values.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5, -3e2, true, null, "x\u00e9\ud83d\ude00\n"], "b": {}}`, `[]`, `"\ud800"`,
		`{"a":1,"a":2}`, `01`, `[1,]`, `{"a" 1}`, `"\x"`, `1e`, `-`, `  "tail" x`, `123456789012345678901234`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeJSON(data)
		want, stdErr := stdPlain(data)
		if stdErr != nil {
			if strings.Contains(stdErr.Error(), "cannot unmarshal number") {
				return // out of float64 range: Python's json.loads (and decodeJSON) give inf
			}
			if err == nil {
				t.Fatalf("%q: accepted, encoding/json says %v", data, stdErr)
			}
			return
		}
		if err != nil {
			if strings.Contains(err.Error(), "UTF-8") {
				return
			}
			t.Fatalf("%q: rejected (%v), encoding/json accepts", data, err)
		}
		if g := plain(got); !reflect.DeepEqual(g, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", data, g, want)
		}
	})
}

// TestDecodeJSONOrderAndNumbers: key order, int/float distinction and depth limit.
func TestDecodeJSONOrderAndNumbers(t *testing.T) {
	v, err := decodeJSON([]byte(`{"z": 1, "a": 1.0, "m": 2e3, "z": 3, "big": 123456789012345678901}`))
	if err != nil {
		t.Fatal(err)
	}
	d := v.AsDict()
	if !reflect.DeepEqual(d.Keys, []string{"z", "a", "m", "big"}) {
		t.Errorf("keys %v", d.Keys)
	}
	if z := d.Data["z"]; !z.IsInt() || z.AsInt() != 3 {
		t.Errorf("z = %v, want int 3 (last value, first position)", z)
	}
	if a := d.Data["a"]; !a.IsFloat() {
		t.Errorf("1.0 decoded as %v, want a float", a)
	}
	if b := d.Data["big"]; !b.IsFloat() {
		t.Errorf("big integer decoded as %v", b)
	}
	if _, err := decodeJSON([]byte(strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1))); err == nil {
		t.Error("depth limit not enforced")
	}
	if _, err := decodeJSON([]byte("\"\xff\"")); err == nil {
		t.Error("invalid UTF-8 accepted")
	}
}

// TestPyFloatRepr: Python's repr(float) on the boundaries of fixed and scientific notation.
func TestPyFloatRepr(t *testing.T) {
	cases := map[float64]string{
		1: "1.0", 0.5: "0.5", -2.25: "-2.25", 1e-4: "0.0001", 1e-5: "1e-05", 1.5e-7: "1.5e-07",
		1e15: "1000000000000000.0", 1e16: "1e+16", 1.2345678901234568e16: "1.2345678901234568e+16",
		123456789012.0: "123456789012.0", 0.30000000000000004: "0.30000000000000004", 1e300: "1e+300", 0: "0.0",
		math.MaxFloat64: "1.7976931348623157e+308", 5e-324: "5e-324",
	}
	for f, want := range cases {
		if got := pyFloatRepr(f); got != want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", f, got, want)
		}
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 1000; i++ {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		var back float64
		if err := json.Unmarshal([]byte(pyFloatRepr(f)), &back); err != nil || back != f {
			t.Fatalf("pyFloatRepr(%v) = %q does not round-trip", f, pyFloatRepr(f))
		}
	}
}
