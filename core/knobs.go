package core

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kvrouter/kvrouter/statestore"
)

// Presets of SPEC §6.2, applied on top of a pool config.
const (
	// PresetLoadAware ignores the cache: overlap_score_credit 0 (pure load balancing).
	PresetLoadAware = "load-aware"
	// PresetAgentic favours cache reuse strongly: credit 2, prefill scale 4, request weight 64.
	PresetAgentic = "agentic"
)

// ApplyPreset returns cfg with a named preset applied ("" = none).
func ApplyPreset(cfg statestore.PoolConfig, preset string) (statestore.PoolConfig, error) {
	switch preset {
	case "":
	case PresetLoadAware:
		cfg.OverlapScoreCredit = 0
	case PresetAgentic:
		cfg.OverlapScoreCredit = 2
		cfg.PrefillLoadScale = 4
		cfg.DecodeActiveRequestWeight = 64
	default:
		return cfg, fmt.Errorf("%w: unknown preset %q (want %q or %q)", statestore.ErrInvalid, preset, PresetLoadAware, PresetAgentic)
	}
	return cfg, nil
}

// ParsePoolConfig decodes a pool's knobs (SPEC §6.4) on top of base, strictly: unknown names, wrong types
// and invalid values are errors naming the knob.
func ParsePoolConfig(base statestore.PoolConfig, raw []byte) (statestore.PoolConfig, error) {
	cfg := base
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return base, fmt.Errorf("%w: pool config: %v", statestore.ErrInvalid, jsonErr(err))
	}
	if err := applyNulls(&cfg, raw); err != nil {
		return base, err
	}
	if err := cfg.Validate(); err != nil {
		return base, err
	}
	return cfg, nil
}

// applyNulls gives JSON null its meaning, which decoding alone does not (it keeps the base value): "none"
// (0) for the knobs the table marks Nullable, an error for the other knobs.
func applyNulls(cfg *statestore.PoolConfig, raw []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil // not an object: Decode already said so
	}
	names := make([]string, 0, len(fields))
	for name, v := range fields {
		if string(bytes.TrimSpace(v)) == "null" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		k, ok := statestore.KnobByName(name)
		switch {
		case !ok: // a gateway setting: null is its empty value
		case !k.Nullable:
			return fmt.Errorf("%w: pool config: %s cannot be null (it has no \"none\")", statestore.ErrInvalid, name)
		default:
			k.Set(cfg, 0)
		}
	}
	return nil
}

// ParseOverrides decodes a route request's "config" object: only the knobs the table marks overridable
// (statestore.Knobs), numbers, valid values.
func ParseOverrides(raw map[string]json.RawMessage) (statestore.Overrides, error) {
	var o statestore.Overrides
	names := make([]string, 0, len(raw))
	for k := range raw {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		knob, ok := statestore.KnobByName(k)
		if !ok || !knob.Overridable {
			return o, fmt.Errorf("%w: config.%s is not a per-request knob (known: %s)", statestore.ErrInvalid, k, strings.Join(overridableNames(), ", "))
		}
		var v float64
		if err := json.Unmarshal(raw[k], &v); err != nil {
			return o, fmt.Errorf("%w: config.%s must be a number", statestore.ErrInvalid, k)
		}
		knob.SetOverride(&o, v)
	}
	return o, o.Validate()
}

// overridableNames lists the per-request knobs, sorted.
func overridableNames() []string {
	var out []string
	for _, k := range statestore.Knobs() {
		if k.Overridable {
			out = append(out, k.Name)
		}
	}
	sort.Strings(out)
	return out
}

// jsonErr shortens encoding/json errors to something a client can act on.
func jsonErr(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q must be %s, got %s", te.Field, te.Type.String(), te.Value)
	}
	return err.Error()
}
