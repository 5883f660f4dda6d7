package statestore

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/luascripts"
)

// TestKnobTableCoversConfig: every decision knob of PoolConfig and every Overrides field is in the table,
// once, with a field pointer of its kind; names are unique; defaults are valid.
func TestKnobTableCoversConfig(t *testing.T) {
	gateway := map[string]bool{"models": true, "tokenizer": true, "chat_template": true, "tokenize": true, "image_token_id": true}
	inTable := map[string]bool{}
	shorts := map[string]bool{}
	var c PoolConfig
	for _, k := range knobTable {
		if inTable[k.Name] || shorts[k.Short] {
			t.Errorf("knob %s/%s listed twice", k.Name, k.Short)
		}
		inTable[k.Name], shorts[k.Short] = true, true
		ok := false
		switch k.field(&c).(type) {
		case *float64:
			ok = k.Kind == KnobFloat
		case *int64, *int:
			ok = k.Kind == KnobInt
		case *bool:
			ok = k.Kind == KnobBool
		case *string:
			ok = k.Kind == KnobEnum && len(k.Values) == int(k.Max)+1 && k.Min == 0
		}
		if !ok {
			t.Errorf("%s: field %T does not match its kind %d", k.Name, k.field(&c), k.Kind)
		}
		if k.Overridable != (k.override != nil) || (k.Overridable && k.Kind != KnobFloat) {
			t.Errorf("%s: overridable %v but override accessor %v (only float knobs can be overridden)", k.Name, k.Overridable, k.override != nil)
		}
		if k.Name != "block_size" && (k.Default < k.Min || k.Default > k.Max) {
			t.Errorf("%s: default %v outside [%v, %v]", k.Name, k.Default, k.Min, k.Max)
		}
	}
	pt := reflect.TypeOf(PoolConfig{})
	for i := 0; i < pt.NumField(); i++ {
		name, _, _ := strings.Cut(pt.Field(i).Tag.Get("json"), ",")
		if !gateway[name] && !inTable[name] {
			t.Errorf("PoolConfig.%s (%q) is not in knobTable", pt.Field(i).Name, name)
		}
	}
	ot := reflect.TypeOf(Overrides{})
	if ot.NumField() != len(overridable) {
		t.Errorf("Overrides has %d fields, the table %d overridable knobs", ot.NumField(), len(overridable))
	}
	for i := 0; i < ot.NumField(); i++ {
		name, _, _ := strings.Cut(ot.Field(i).Tag.Get("json"), ",")
		if k, ok := KnobByName(name); !ok || !k.Overridable {
			t.Errorf("Overrides.%s (%q) is not an overridable knob", ot.Field(i).Name, name)
		}
	}
	if err := DefaultPoolConfig(16).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

// TestKnobBounds: each knob's bounds are enforced with an error naming it, one past each bound.
func TestKnobBounds(t *testing.T) {
	for _, k := range knobTable {
		if k.Kind == KnobBool {
			continue
		}
		step := 1.0
		if k.Kind == KnobFloat {
			step = k.Max // "absurdly large" is checked beyond Max
		}
		for _, v := range []float64{k.Min - 1, k.Max + step} {
			c := DefaultPoolConfig(16)
			k.Set(&c, v)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), k.Name) {
				t.Errorf("%s = %v: got %v, want an error naming it", k.Name, v, err)
			}
		}
		c := DefaultPoolConfig(16)
		k.Set(&c, k.Max)
		if err := c.Validate(); err != nil {
			t.Errorf("%s = max %v: %v", k.Name, k.Max, err)
		}
	}
}

// distinctConfig sets every knob to a valid value of its own (no two alike, none a default).
func distinctConfig() PoolConfig {
	c := DefaultPoolConfig(16)
	for i, k := range knobTable {
		switch k.Kind {
		case KnobFloat:
			k.Set(&c, 0.125*float64(i+1)+1.0/3)
		case KnobInt:
			k.Set(&c, k.Min+float64(i+7))
		case KnobBool:
			k.Set(&c, 1-k.Default)
		case KnobEnum:
			k.Set(&c, k.Max)
		}
	}
	return c
}

// TestKnobsGoLuaAgree runs the Lua prelude (knobs_gen.lua + lib.lua) in a real Redis against a pool
// written by PutPool and a route ARGV built by routeArgs: Lua's cfg_get must read every knob Go wrote,
// cfg_override must apply every override where Go put it and end where the worker lists start, and
// knobs_gen.lua's table and filter reasons must equal Go's.
func TestKnobsGoLuaAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := NewRedis(c, RedisOptions{Prefix: "knobs:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := distinctConfig()
	if err := st.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	back, err := st.GetPool(ctx, "p")
	if err != nil || !reflect.DeepEqual(back, cfg) {
		t.Fatalf("GetPool = %+v, %v; want %+v", back, err, cfg)
	}

	req := RouteRequest{AllowedWorkers: []string{"w-allowed"}, ExcludedWorkers: []string{"w-x"}}
	for i, k := range overridable {
		k.SetOverride(&req.Overrides, 10+float64(i)/7)
	}
	args := routeArgs("route", &req)
	body := `
local function f17(x) return string.format('%.17g', x) end
bind(KEYS)
local cfg = cfg_get()
local pool, eff, after = {}, {}, {}
for i, f in ipairs(CFG_FIELDS) do pool[i] = f17(cfg[f]) end
local ecfg, nexta = cfg_override(cfg, ARGV, 9)
for i, f in ipairs(CFG_FIELDS) do eff[i] = f17(ecfg[f]) end
for i, f in ipairs(CFG_FIELDS) do after[i] = f17(cfg[f]) end
if table.concat(after, ',') ~= table.concat(pool, ',') then return redis.error_reply('cfg_override wrote the pool knobs (a memoized table)') end
local meta, reasons = knobs_meta()
local m = {}
for i, k in ipairs(meta) do m[i] = table.concat({k[1], k[2], k[3], f17(k[4]), f17(k[5]), f17(k[6]), k[7]}, '|') end
return {pool, eff, tostring(nexta), m, reasons, CFG_OVERRIDES}
`
	src := luascripts.Prelude() + "\n" + luascripts.WrapBody(body) // (its locals in a function of their own, as an operation's)
	keys := PoolKeys("knobs:", "p")
	res, err := c.Do(ctx, c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	strs := func(i int) []string { v, _ := res[i].AsStrSlice(); return v }
	num := func(s string) float64 {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Errorf("Lua number %q: %v", s, err)
		}
		return v
	}
	want := req.Overrides.Apply(cfg)
	pool, eff := strs(0), strs(1)
	if len(pool) != len(knobTable) || len(eff) != len(knobTable) {
		t.Fatalf("Lua read %d/%d knobs, the table has %d", len(pool), len(eff), len(knobTable))
	}
	for i, k := range knobTable {
		if g, w := num(pool[i]), k.Value(&cfg); g != w {
			t.Errorf("cfg_get %s = %v, Go wrote %v", k.Short, g, w)
		}
		if g, w := num(eff[i]), k.Value(&want); g != w {
			t.Errorf("cfg_override %s = %v, Go's Apply gives %v", k.Short, g, w)
		}
	}
	nexta, _ := res[2].ToString()
	if n, _ := strconv.Atoi(nexta); n < 1 || n+1 > len(args) || args[n-1] != "1" || args[n] != "w-allowed" {
		t.Errorf("cfg_override ends at ARGV[%s]; Go's allowed worker count is at ARGV[10]", nexta)
	}
	meta := strs(3)
	if len(meta) != len(knobTable) {
		t.Fatalf("knobs_gen.lua lists %d knobs, Go %d", len(meta), len(knobTable))
	}
	for i, k := range knobTable {
		f := strings.Split(meta[i], "|")
		per := "0"
		if k.Overridable {
			per = "1"
		}
		if len(f) != 7 || f[0] != k.Short || f[1] != k.Name || f[2] != k.Unit || num(f[3]) != k.Default ||
			num(f[4]) != k.Min || num(f[5]) != k.Max || f[6] != per {
			t.Errorf("knobs_gen.lua knob %d: %q, Go: %+v", i+1, meta[i], k)
		}
	}
	if g, w := strs(4), FilterReasons(); !reflect.DeepEqual(g, w) {
		t.Errorf("knobs_gen.lua filter reasons %q, Go %q", g, w)
	}
	var ovr []string
	for _, k := range overridable {
		ovr = append(ovr, k.Short)
	}
	if g := strs(5); !reflect.DeepEqual(g, ovr) {
		t.Errorf("CFG_OVERRIDES %q, Go %q", g, ovr)
	}
}

// TestFilterReasonsComplete: every Reason* constant of errors.go is in FilterReasons (so in Lua), once.
func TestFilterReasonsComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var consts []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, sp := range g.Specs {
			vs := sp.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if strings.HasPrefix(n.Name, "Reason") {
					v, _ := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
					consts = append(consts, v)
				}
			}
		}
	}
	got := append([]string(nil), FilterReasons()...)
	sort.Strings(got)
	sort.Strings(consts)
	if !reflect.DeepEqual(got, consts) {
		t.Errorf("FilterReasons %q; Reason constants %q", got, consts)
	}
}
