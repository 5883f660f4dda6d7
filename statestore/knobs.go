package statestore

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

//go:generate go run ../internal/knobgen

// KnobKind is how a knob is typed in PoolConfig and written to the pool's Redis cfg hash.
type KnobKind uint8

const (
	// KnobFloat: a float64 field, stored as the shortest round-trip decimal; finite, checked against Min/Max.
	KnobFloat KnobKind = iota
	// KnobInt: an int or int64 field, stored in decimal; checked against Min/Max.
	KnobInt
	// KnobBool: a bool field, stored as "1" or "0" (Lua reads 1/0).
	KnobBool
	// KnobEnum: a string field naming one of Knob.Values; stored (cfg hash and 'bin') as the name's index
	// in Values, so Lua compares numbers. "" reads as Values[0], the default.
	KnobEnum
)

// Knob is one pool knob (SPEC §6.4). The table knobTable is the single source: it drives PoolConfig's
// defaults and validation, the Redis cfg hash (PutPool, GetPool), per-request overrides (core's
// ParseOverrides, Overrides.Apply/Validate, route.lua's ARGV), serve's pool flags, docs/API.md's knob
// table and luascripts/knobs_gen.lua (`go generate ./statestore`).
type Knob struct {
	// Name is the API's (JSON, YAML, flag with '_' → '-').
	Name string
	// Short is the field in the pool's Redis cfg hash and the key of Lua's cfg table.
	Short string
	Kind  KnobKind
	// Unit is "tokens", "ms", "failures", or "" (a factor or weight).
	Unit string
	// Default is DefaultPoolConfig's value (block_size has none: the caller names it).
	Default float64
	// Min and Max bound the value, inclusive.
	Min, Max float64
	// ZeroMeans says what 0 stands for ("" = nothing special).
	ZeroMeans string
	// Nullable: SPEC §6.4's "none" — JSON null sets the knob to 0 (off). Null is refused for the others.
	Nullable bool
	// Overridable: a route request may replace the pool's value for itself ("config": {...}).
	Overridable bool
	// Help is one line for flags and docs (no default: Describe adds it).
	Help string
	// Values are a KnobEnum's names, by their numeric encoding (index); Default, Min and Max are indices.
	Values []string

	field    func(*PoolConfig) any      // pointer to the field: *int, *int64, *float64, *bool or *string (enum)
	override func(*Overrides) **float64 // the Overrides field (Overridable knobs only)
}

// knobTable lists every knob in cfg order: the order of the packed cfg "bin" field that every Lua
// script reads (one f64 per knob). Append new knobs at the end, never reorder: a pool written before a
// knob existed reads 0 for it until its config is written again.
var knobTable = []Knob{
	{Name: "block_size", Short: "bs", Kind: KnobInt, Unit: "tokens", Min: 1, Max: MaxBlockSize,
		Help:  "KV block size of the pool's engines, tokens: required, must equal theirs, immutable while workers exist",
		field: func(c *PoolConfig) any { return &c.BlockSize }},
	{Name: "overlap_score_credit", Short: "osc", Kind: KnobFloat, Default: 1, Max: MaxKnob, Overridable: true,
		ZeroMeans: "pure load balancing", Help: "credit per cached device-tier block in the cost",
		field:    func(c *PoolConfig) any { return &c.OverlapScoreCredit },
		override: func(o *Overrides) **float64 { return &o.OverlapScoreCredit }},
	{Name: "host_cache_hit_weight", Short: "hw", Kind: KnobFloat, Default: 0.75, Max: MaxKnob, Overridable: true,
		Help:     "credit per cached host-tier block",
		field:    func(c *PoolConfig) any { return &c.HostCacheHitWeight },
		override: func(o *Overrides) **float64 { return &o.HostCacheHitWeight }},
	{Name: "disk_cache_hit_weight", Short: "dw", Kind: KnobFloat, Default: 0.25, Max: MaxKnob, Overridable: true,
		Help:     "credit per cached disk-tier block",
		field:    func(c *PoolConfig) any { return &c.DiskCacheHitWeight },
		override: func(o *Overrides) **float64 { return &o.DiskCacheHitWeight }},
	{Name: "prefill_load_scale", Short: "pls", Kind: KnobFloat, Default: 1, Max: MaxKnob, Overridable: true,
		Help:     "weight of the prefill term",
		field:    func(c *PoolConfig) any { return &c.PrefillLoadScale },
		override: func(o *Overrides) **float64 { return &o.PrefillLoadScale }},
	{Name: "overlap_score_credit_decay", Short: "decay", Kind: KnobFloat, Max: MaxKnob, Overridable: true,
		ZeroMeans: "no decay", Help: "shrinks device credit on workers with more queued prefill than the least-loaded eligible one",
		field:    func(c *PoolConfig) any { return &c.OverlapScoreCreditDecay },
		override: func(o *Overrides) **float64 { return &o.OverlapScoreCreditDecay }},
	{Name: "decode_active_request_weight", Short: "rw", Kind: KnobFloat, Max: MaxKnob, Overridable: true,
		Help:     "cost per active request",
		field:    func(c *PoolConfig) any { return &c.DecodeActiveRequestWeight },
		override: func(o *Overrides) **float64 { return &o.DecodeActiveRequestWeight }},
	{Name: "temperature", Short: "temp", Kind: KnobFloat, Max: MaxKnob, Overridable: true,
		ZeroMeans: "take the minimum cost", Help: "softmax sampling temperature over normalised costs",
		field:    func(c *PoolConfig) any { return &c.Temperature },
		override: func(o *Overrides) **float64 { return &o.Temperature }},
	{Name: "busy_prefill_fraction", Short: "bpf", Kind: KnobFloat, Max: MaxKnob, Overridable: true,
		Nullable: true, ZeroMeans: "no filter", Help: "a rank is busy when active prefill tokens > f · max_num_batched_tokens",
		field:    func(c *PoolConfig) any { return &c.BusyPrefillFraction },
		override: func(o *Overrides) **float64 { return &o.BusyPrefillFraction }},
	{Name: "busy_decode_fraction", Short: "bdf", Kind: KnobFloat, Max: MaxKnob, Overridable: true,
		Nullable: true, ZeroMeans: "no filter", Help: "a rank is busy when active decode blocks > f · total_kv_blocks",
		field:    func(c *PoolConfig) any { return &c.BusyDecodeFraction },
		override: func(o *Overrides) **float64 { return &o.BusyDecodeFraction }},
	{Name: "kv_events", Short: "kve", Kind: KnobBool, Default: 1, Max: 1,
		Help:  "workers publish KV events unless they say otherwise (false = approximate mode)",
		field: func(c *PoolConfig) any { return &c.KVEvents }},
	{Name: "approx_ttl_ms", Short: "attl", Kind: KnobInt, Unit: "ms", Default: 120000, Min: 1, Max: MaxTTLMs,
		Help:  "sliding TTL of approximate-mode entries",
		field: func(c *PoolConfig) any { return &c.ApproxTTLMs }},
	{Name: "predicted_ttl_ms", Short: "pttl", Kind: KnobInt, Unit: "ms", Max: MaxTTLMs,
		Nullable: true, ZeroMeans: "off", Help: "TTL of predict-on-route entries for event-emitting workers",
		field: func(c *PoolConfig) any { return &c.PredictedTTLMs }},
	{Name: "session_affinity_ttl_ms", Short: "sttl", Kind: KnobInt, Unit: "ms", Max: MaxTTLMs,
		Nullable: true, ZeroMeans: "session affinity off", Help: "idle TTL of session bindings",
		field: func(c *PoolConfig) any { return &c.SessionAffinityTTLMs }},
	{Name: "lease_ttl_ms", Short: "lttl", Kind: KnobInt, Unit: "ms", Default: 300000, Min: 1, Max: MaxTTLMs,
		Help:  "how long a booked request counts before it is released automatically",
		field: func(c *PoolConfig) any { return &c.LeaseTTLMs }},
	{Name: "worker_ttl_ms", Short: "wttl", Kind: KnobInt, Unit: "ms", Max: MaxTTLMs,
		Nullable: true, ZeroMeans: "live until removed", Help: "a worker is live while it re-registers or emits events within this window",
		field: func(c *PoolConfig) any { return &c.WorkerTTLMs }},
	{Name: "max_prompt_tokens", Short: "mpt", Kind: KnobInt, Unit: "tokens", Default: 1048576, Min: 1, Max: MaxPromptTokensCap,
		Help:  "longest accepted prompt",
		field: func(c *PoolConfig) any { return &c.MaxPromptTokens }},
	{Name: "unhealthy_after", Short: "ua", Kind: KnobInt, Unit: "failures", Default: 3, Max: MaxUnhealthyAfter,
		ZeroMeans: "health tracking off", Help: "failed forwards in a row that mark a worker unhealthy for every router",
		field: func(c *PoolConfig) any { return &c.UnhealthyAfter }},
	{Name: "unhealthy_backoff_ms", Short: "ubo", Kind: KnobInt, Unit: "ms", Default: 10000, Max: MaxTTLMs,
		Help:  "how long an unhealthy worker is skipped before one request probes it (> 0 while unhealthy_after > 0; doubles per failed probe, up to 8×)",
		field: func(c *PoolConfig) any { return &c.UnhealthyBackoffMs }},
	// cost_model is not overridable per request: a ttft decision books a lease whose features calibrate the
	// chosen rank at prefill_done, and the fit is only meaningful for decisions taken with the pool's model;
	// a per-request switch would also defeat the memory fast path's one-model-per-pool proof.
	{Name: "cost_model", Short: "cm", Kind: KnobEnum, Values: []string{CostModelDynamo, CostModelTTFT}, Max: 1,
		Help:  "candidate cost: dynamo (SPEC §6.2, blocks) or ttft (predicted time to first token, seconds, calibrated online: SPEC §6.6)",
		field: func(c *PoolConfig) any { return &c.CostModel }},
	// The ttft coefficients' 0 is their built-in default (not a default of 0 written into the pool), so a
	// pool written before they existed, which reads 0 for them in Go and Lua alike, has valid ones.
	{Name: "ttft_prefill_rate", Short: "tpr", Kind: KnobFloat, Unit: "tokens/s", Max: MaxKnob,
		ZeroMeans: "40000 tokens/s (an 8B model on one H100)",
		Help:      "cost_model ttft: the pool's default prefill rate, where every rank's calibration starts and the scale of its bounds",
		field:     func(c *PoolConfig) any { return &c.TTFTPrefillRate }},
	{Name: "ttft_decode_coeff", Short: "tdc", Kind: KnobFloat, Unit: "s/block", Max: MaxKnob,
		ZeroMeans: "0.000001 s/block",
		Help:      "cost_model ttft: the pool's default time one active decode block adds to a first token",
		field:     func(c *PoolConfig) any { return &c.TTFTDecodeCoeff }},
}

// Cost models (knob cost_model), by their numeric encoding: 0 dynamo, 1 ttft.
const (
	CostModelDynamo = "dynamo"
	CostModelTTFT   = "ttft"
)

// What ttft_prefill_rate and ttft_decode_coeff 0 stand for: an 8B model in bf16 on one H100 (~40 k
// prompt tokens/s; 16 tokens of attended context at ~3.3 TB/s per decode step, rounded up to 1 µs per
// block). Online calibration corrects them per rank; they fix the scale of its bounds (1/64 … 64 times).
// luascripts/lib.lua's ttft_cal repeats them.
const (
	DefaultTTFTPrefillRate = 40000
	DefaultTTFTDecodeCoeff = 1e-6
)

// overridable are knobTable's Overridable knobs in table order: the order of route.lua's packed override argument.
var overridable = func() []*Knob {
	var out []*Knob
	for i := range knobTable {
		if knobTable[i].Overridable {
			out = append(out, &knobTable[i])
		}
	}
	return out
}()

// Knobs returns the knob table in cfg order (a copy).
func Knobs() []Knob { return append([]Knob(nil), knobTable...) }

// KnobByName returns the knob with the API name, or false.
func KnobByName(name string) (Knob, bool) {
	for _, k := range knobTable {
		if k.Name == name {
			return k, true
		}
	}
	return Knob{}, false
}

// Value returns the knob's value in c as a float64 (exact: every bound is below 2^53).
func (k Knob) Value(c *PoolConfig) float64 {
	switch p := k.field(c).(type) {
	case *float64:
		return *p
	case *int64:
		return float64(*p)
	case *int:
		return float64(*p)
	case *bool:
		if *p {
			return 1
		}
	case *string:
		return float64(k.enumIndex(*p))
	}
	return 0
}

// enumIndex is an enum name's encoding: its index in Values ("" = 0, the default), -1 when unknown.
func (k Knob) enumIndex(name string) int {
	if name == "" {
		return 0
	}
	for i, v := range k.Values {
		if v == name {
			return i
		}
	}
	return -1
}

// Set stores v (already valid for the knob's kind) in c.
func (k Knob) Set(c *PoolConfig, v float64) {
	switch p := k.field(c).(type) {
	case *float64:
		*p = v
	case *int64:
		*p = int64(v)
	case *int:
		*p = int(v)
	case *bool:
		*p = v != 0
	case *string:
		if i := int(v); float64(i) == v && i >= 0 && i < len(k.Values) {
			*p = k.Values[i]
		} else {
			*p = strconv.FormatFloat(v, 'g', -1, 64) // no such value: Validate names the knob
		}
	}
}

// canonical returns c with every enum knob spelled by its name ("" → the default's name), as a
// round trip through the Redis cfg hash gives it back.
func canonical(c PoolConfig) PoolConfig {
	for _, k := range knobTable {
		if k.Kind == KnobEnum {
			if i := k.enumIndex(*k.field(&c).(*string)); i >= 0 {
				k.Set(&c, float64(i))
			}
		}
	}
	return c
}

// SetOverride makes o replace the knob's pool value with v; false when the knob is not overridable.
func (k Knob) SetOverride(o *Overrides, v float64) bool {
	if k.override == nil {
		return false
	}
	*k.override(o) = &v
	return true
}

// encode is the knob's value as stored in the Redis cfg hash.
func (k Knob) encode(c *PoolConfig) string {
	if k.Kind == KnobFloat {
		return fstr(k.Value(c))
	}
	return strconv.FormatInt(k.intValue(c), 10)
}

// decode parses a cfg hash field written by encode into c (a missing field reads 0, like Lua's cfg_get).
func (k Knob) decode(c *PoolConfig, s string) {
	switch k.Kind {
	case KnobBool:
		k.Set(c, b2f(s == "1"))
	case KnobInt:
		v, _ := strconv.ParseInt(s, 10, 64)
		k.setInt(c, v)
	default:
		v, _ := strconv.ParseFloat(s, 64)
		k.Set(c, v)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// intValue and setInt are Value and Set without the float64 detour, for integer knobs.
func (k Knob) intValue(c *PoolConfig) int64 {
	switch p := k.field(c).(type) {
	case *int64:
		return *p
	case *int:
		return int64(*p)
	}
	return int64(k.Value(c))
}

func (k Knob) setInt(c *PoolConfig, v int64) {
	switch p := k.field(c).(type) {
	case *int64:
		*p = v
	case *int:
		*p = int(v)
	default:
		k.Set(c, float64(v))
	}
}

// check validates the knob's value in c against its kind and bounds; the error names the knob.
func (k Knob) check(c *PoolConfig) error {
	switch k.Kind {
	case KnobInt:
		if v := k.intValue(c); float64(v) < k.Min || float64(v) > k.Max {
			return fmt.Errorf("%w: %s must be in [%d, %d]%s, got %d", ErrInvalid, k.Name, int64(k.Min), int64(k.Max), k.boundsUnit(), v)
		}
	case KnobFloat:
		return k.checkFloat("", k.Value(c))
	case KnobEnum:
		if v := *k.field(c).(*string); k.enumIndex(v) < 0 {
			return fmt.Errorf("%w: %s must be %s, got %q", ErrInvalid, k.Name, strings.Join(k.Values, " or "), v)
		}
	}
	return nil
}

// checkFloat validates a float knob's value (prefix "config." for a request's override).
func (k Knob) checkFloat(prefix string, v float64) error {
	name := prefix + k.Name
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%w: %s must be a finite number, got %v", ErrInvalid, name, v)
	case v < k.Min:
		return fmt.Errorf("%w: %s must be >= %v, got %v", ErrInvalid, name, k.Min, v)
	case v > k.Max:
		return fmt.Errorf("%w: %s is absurdly large (%v > %g)", ErrInvalid, name, v, k.Max)
	}
	return nil
}

// boundsUnit is the unit shown after an integer knob's bounds in its error (token counts read plainly).
func (k Knob) boundsUnit() string {
	if k.Unit == "" || k.Unit == "tokens" {
		return ""
	}
	return " " + k.Unit
}

// Describe is the knob's help with its default, for flags and docs.
func (k Knob) Describe() string {
	switch {
	case k.Name == "block_size":
		return k.Help
	case k.Kind == KnobBool:
		return fmt.Sprintf("%s (default %t)", k.Help, k.Default != 0)
	case k.Kind == KnobEnum:
		return fmt.Sprintf("%s (default %s)", k.Help, k.Values[int(k.Default)])
	case k.Default == 0 && k.ZeroMeans != "":
		return fmt.Sprintf("%s (default 0 = %s)", k.Help, k.ZeroMeans)
	}
	d := k.Help + " (default " + strconv.FormatFloat(k.Default, 'f', -1, 64)
	if k.Unit != "" {
		d += " " + k.Unit
	}
	if k.ZeroMeans != "" {
		d += "; 0 = " + k.ZeroMeans
	}
	return d + ")"
}
