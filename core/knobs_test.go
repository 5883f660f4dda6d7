package core

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestParsePoolConfigNull: null is "none" (0) for the nullable knobs and an error for the others.
func TestParsePoolConfigNull(t *testing.T) {
	base := statestore.DefaultPoolConfig(16)
	base.PredictedTTLMs, base.BusyPrefillFraction = 5000, 0.5
	cfg, err := ParsePoolConfig(base, []byte(`{"predicted_ttl_ms": null, "busy_prefill_fraction": null, "models": null}`))
	if err != nil || cfg.PredictedTTLMs != 0 || cfg.BusyPrefillFraction != 0 {
		t.Fatalf("nullable knobs set to null: %+v, %v; want both 0", cfg, err)
	}
	for _, k := range statestore.Knobs() {
		_, err := ParsePoolConfig(base, []byte(`{"`+k.Name+`": null}`))
		if k.Nullable != (err == nil) {
			t.Errorf("%s: null gave %v (nullable %v)", k.Name, err, k.Nullable)
		}
		if err != nil && (!errors.Is(err, statestore.ErrInvalid) || !strings.Contains(err.Error(), k.Name)) {
			t.Errorf("%s: %v; want ErrInvalid naming the knob", k.Name, err)
		}
	}
}

// TestParseOverrides: exactly the table's overridable knobs are accepted, each into its own field.
func TestParseOverrides(t *testing.T) {
	for i, k := range statestore.Knobs() {
		v := 0.5 + float64(i)
		o, err := ParseOverrides(map[string]json.RawMessage{k.Name: json.RawMessage(jsonNum(v))})
		if !k.Overridable {
			if err == nil || !strings.Contains(err.Error(), "not a per-request knob") {
				t.Errorf("%s: override accepted (%v)", k.Name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", k.Name, err)
		}
		if got := k.Value(ptr(o.Apply(statestore.PoolConfig{}))); got != v {
			t.Errorf("%s: override %v applied as %v", k.Name, v, got)
		}
	}
	if _, err := ParseOverrides(map[string]json.RawMessage{"temperature": json.RawMessage(`-1`)}); err == nil ||
		err.Error() != "invalid argument: config.temperature must be >= 0, got -1" {
		t.Errorf("negative temperature: %v", err)
	}
}

func jsonNum(v float64) string { b, _ := json.Marshal(v); return string(b) }

func ptr(c statestore.PoolConfig) *statestore.PoolConfig { return &c }

// TestParsePoolConfigCostModel: cost_model is an enum by name (JSON string), not a number, and not a
// per-request knob.
func TestParsePoolConfigCostModel(t *testing.T) {
	base := statestore.DefaultPoolConfig(16)
	if base.CostModel != statestore.CostModelDynamo {
		t.Fatalf("default cost_model %q", base.CostModel)
	}
	cfg, err := ParsePoolConfig(base, []byte(`{"cost_model": "ttft", "ttft_prefill_rate": 12000, "ttft_decode_coeff": 2e-6}`))
	if err != nil || !cfg.TTFT() || cfg.TTFTPrefillRate != 12000 || cfg.TTFTDecodeCoeff != 2e-6 {
		t.Fatalf("ttft config: %+v, %v", cfg, err)
	}
	for _, bad := range []string{`{"cost_model": "fast"}`, `{"cost_model": 1}`, `{"ttft_prefill_rate": -1}`} {
		if _, err := ParsePoolConfig(base, []byte(bad)); err == nil || !errors.Is(err, statestore.ErrInvalid) {
			t.Errorf("%s: %v; want invalid", bad, err)
		}
	}
	if _, err := ParseOverrides(map[string]json.RawMessage{"cost_model": json.RawMessage(`"ttft"`)}); err == nil {
		t.Error("cost_model accepted as a per-request override")
	}
	if got := cfg.TTFTCalibration().Ref; got != (statestore.TTFTCoeffs{PrefillRate: 12000, DecodeCoeff: 2e-6}) {
		t.Errorf("calibration reference %+v", got)
	}
	if got := base.TTFTCalibration().Ref; got != (statestore.TTFTCoeffs{PrefillRate: statestore.DefaultTTFTPrefillRate, DecodeCoeff: statestore.DefaultTTFTDecodeCoeff}) {
		t.Errorf("default calibration reference %+v", got)
	}
}
