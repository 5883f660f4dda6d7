// Package luascripts embeds kvrouter's Redis Lua: one file per atomic operation, each starting with a
// header (KEYS, ARGV with units, reply shape, complexity), lib.lua with the helpers they share, and
// knobs_gen.lua with the pool knobs and filter reasons, generated from statestore's knob table
// (`go generate ./statestore`): the prelude, knobs_gen.lua then lib.lua.
//
// Library builds one Redis Functions library from them, kvrouter_v<Layout>: the prelude once, then each
// operation's body wrapped as a function registered as kvr<Layout>_<name>. It is loaded once per node
// (FUNCTION LOAD REPLACE), so the prelude's definitions are not re-run on every call as they were when every
// EVALSHA script carried its own copy. Source still joins the prelude and one operation into a plain script
// (EVAL), for profiling variants and for fixtures of an older layout.
package luascripts

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

//go:embed *.lua
var files embed.FS

// Layout is the key-layout version this code reads and writes (SPEC §8 "Layout version"): recorded in
// every pool's cfg hash (field "layout"), and part of the library and function names, so routers of two
// layouts can share a Redis during a rolling upgrade without replacing each other's functions.
// lib.lua declares the same number (LAYOUT); TestLayoutMatchesLib checks it.
const Layout = 7

// Knobs returns knobs_gen.lua, the generated part of every script's prelude (before lib.lua).
func Knobs() string {
	b, _ := files.ReadFile("knobs_gen.lua") // embedded: cannot fail
	return string(b)
}

// Prelude returns what every script starts with: knobs_gen.lua, then lib.lua.
func Prelude() string {
	lib, _ := files.ReadFile("lib.lua") // embedded: cannot fail
	return Knobs() + "\n" + string(lib)
}

// KeySuffixes are the suffixes of a pool's keys in the order of lib.lua's KEYS list (its header: KEYS 1
// to 27; bind reads them by these positions). statestore.PoolKeys builds the names from them;
// TestKeySuffixesMatchLib checks the order against lib.lua.
var KeySuffixes = []string{"cfg", "ro", "wk", "seen", "lv", "fence", "sc", "orph", "nd", "dead", "ls", "lx", "ss", "sx", "e:", "g:", "s:", "wz", "hc", "hu", "sy", "lz", "lc", "sz", "lp", "tc", "lzn"}

// Script is one atomic operation.
type Script struct {
	// Name is the file name without ".lua".
	Name string
	// ReadOnly: the operation never writes (registered with the no-writes flag, so FCALL_RO can run it).
	ReadOnly bool
	// Idempotent: running it twice has the effect of running it once, so a call whose reply was lost on a
	// broken connection may be sent again. Operations that book or count never are.
	Idempotent bool
	// Module: the file is not a body run on every call but a chunk run once, when the library loads,
	// that returns the operation as a function of (KEYS, ARGV) (route.lua: its many named functions are
	// then created once, not on every call). Its top level may not call the standard library, which Redis
	// 7.0 does not expose at load time.
	Module bool
	// Keys, when set, are the only pool keys (KeySuffixes names, in KeySuffixes order) the operation
	// touches: the caller passes just those (KeyPositions), and the library's wrapper spreads them back to
	// their lib.lua positions before the body runs (the others are nil there, so a body that used one
	// would fail loudly). Redis builds one Lua string per key on every call (~1.2 k instructions each
	// at a pool's key length: callgrind, Redis 7.0), so an operation on every decision's path that needs
	// half the keys should not be sent all of them. Nil: every key.
	Keys []string
}

// keyPosition maps a KeySuffixes name to its 1-based lib.lua position.
var keyPosition = func() map[string]int {
	m := make(map[string]int, len(KeySuffixes))
	for i, name := range KeySuffixes {
		m[name] = i + 1
	}
	return m
}()

// KeyPositions returns the 1-based lib.lua positions of s's keys (nil: every key, in order); a name that
// is not a pool key is left out (TestScriptKeys fails on it).
func (s Script) KeyPositions() []int {
	if s.Keys == nil {
		return nil
	}
	pos := make([]int, 0, len(s.Keys))
	for _, k := range s.Keys {
		if p, ok := keyPosition[k]; ok {
			pos = append(pos, p)
		}
	}
	return pos
}

// keysPrologue is Lua run first in s's wrapper: KEYS as the full positional list bind expects.
func (s Script) keysPrologue() string {
	pos := s.KeyPositions()
	if pos == nil {
		return ""
	}
	idx := make([]string, len(pos))
	for i, p := range pos {
		idx[i] = fmt.Sprint(p)
	}
	return "KEYS = keys_spread(KEYS, '" + strings.Join(idx, ",") + "')\n"
}

// Scripts are the operations, lib excluded.
var (
	ApplyEvents    = Script{Name: "apply_events", Module: true}
	ResolveParents = Script{Name: "resolve_parents", ReadOnly: true, Idempotent: true}
	Route          = Script{Name: "route", Module: true}
	Lease          = Script{Name: "lease", Keys: []string{"cfg", "ro", "lv", "sc", "ls", "lx", "ss", "sy", "lz", "lp", "tc", "lzn"}}
	PutPool        = Script{Name: "put_pool", Idempotent: true}
	PutWorker      = Script{Name: "put_worker", Idempotent: true}
	RemoveWorker   = Script{Name: "remove_worker"}
	Workers        = Script{Name: "workers", Idempotent: true}
	ReportForward  = Script{Name: "report_forward"}
	Migrate        = Script{Name: "migrate", Idempotent: true}
	// RescoreStep: a step sent twice walks twice as far; the rescoring it ends is the same.
	RescoreStep = Script{Name: "rescore_step", Idempotent: true}

	All = []Script{ApplyEvents, ResolveParents, Route, Lease, PutPool, PutWorker, RemoveWorker, Workers, ReportForward, Migrate, RescoreStep}
)

// LibraryName is the Functions library holding every operation of this build: kvrouter_v<Layout>_<digest>.
//
// Why a digest of the sources in the name: a node keeps whatever library it loaded first, and calls
// reload only on "Function not found". With the layout alone in the name, a new build with changed
// scripts but the same layout would silently keep running the old build's code on every node that had
// it (and a benchmark would measure the old scripts). With the digest, a changed script is a new library
// and new function names: the first call of the new build loads it, and two builds of one layout can
// share a server during a rolling upgrade, each running its own code. Old libraries stay until deleted
// (docs/REDIS.md "Functions": FUNCTION LIST / FUNCTION DELETE).
func LibraryName() string { return fmt.Sprintf("kvrouter_v%d_%s", Layout, SourceDigest()) }

// Function is the name s is registered under (function names are global across libraries, so the
// layout and the sources' digest are part of it).
func (s Script) Function() string {
	if f, ok := functionNames.Load(s.Name); ok {
		return f.(string)
	}
	f := fmt.Sprintf("kvr%d_%s_%s", Layout, SourceDigest(), s.Name)
	functionNames.Store(s.Name, f)
	return f
}

// functionNames memoizes Function by operation name: every call of every operation needs it.
var functionNames sync.Map

var sourceDigest = sync.OnceValue(func() string {
	h := sha256.New()
	h.Write([]byte(Prelude()))
	for _, s := range All {
		body, _ := s.Body() // embedded: cannot fail
		fmt.Fprintf(h, "\x00%s\x00%s", s.Name, body)
	}
	return hex.EncodeToString(h.Sum(nil))[:10]
})

// SourceDigest is the first 10 hex digits of the SHA-256 of the prelude and every operation's file (with
// its name): it changes whenever any script does.
func SourceDigest() string { return sourceDigest() }

// Body returns the operation's own file.
func (s Script) Body() (string, error) {
	b, err := files.ReadFile(s.Name + ".lua")
	if err != nil {
		return "", fmt.Errorf("luascripts: no script %q", s.Name)
	}
	return string(b), nil
}

// Source returns one operation as a self-contained EVAL script: Prelude followed by the operation's file
// (WrapBody, or WrapModule for a module).
func Source(name string) (string, error) {
	s := Script{Name: name}
	for _, k := range All {
		if k.Name == name {
			s = k
		}
	}
	body, err := s.Body()
	if err != nil {
		return "", err
	}
	if s.Module {
		return Prelude() + "\n" + WrapModule(body), nil
	}
	return Prelude() + "\n" + WrapBody(s.keysPrologue()+body), nil
}

// WrapBody wraps an operation's file as the library does (a function of KEYS and ARGV, called once), so
// its top-level locals live in their own function: Lua 5.1 allows 200 locals per function, and the
// prelude's plus route's together exceed that in one EVAL main chunk.
func WrapBody(body string) string {
	return "local function kvr_op(KEYS, ARGV)\n" + body + "\nend\nreturn kvr_op(KEYS, ARGV)\n"
}

// WrapModule runs a module's file once (a function of no arguments, so its top-level locals live in their
// own function, as WrapBody's) and calls the operation it returns.
func WrapModule(body string) string {
	return "local kvr_op = (function()\n" + body + "\nend)()\nreturn kvr_op(KEYS, ARGV)\n"
}

// Library returns the Functions library source (FUNCTION LOAD REPLACE): the shebang naming it, Prelude,
// then every operation as `local function op_<name>(KEYS, ARGV) <body> end` (a module: `local op_<name> =
// (function() <file> end)()`, run once here) and its registration, wrapped by lib.lua's gc_paced (the
// collector's step multiplier while a call runs and between calls).
// KEYS and ARGV are the function's parameters, so each body reads exactly as it does in an EVAL script.
func Library() (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=%s\n%s\n", LibraryName(), Prelude())
	for _, s := range All {
		body, err := s.Body()
		if err != nil {
			return "", err
		}
		if s.Module {
			fmt.Fprintf(&b, "local op_%s = (function()\n%s\nend)()\n", s.Name, body)
		} else {
			fmt.Fprintf(&b, "local function op_%s(KEYS, ARGV)\n%s%s\nend\n", s.Name, s.keysPrologue(), body)
		}
		flags := "{}"
		if s.ReadOnly {
			flags = "{'no-writes'}"
		}
		fmt.Fprintf(&b, "redis.register_function{function_name = '%s', callback = gc_paced(op_%s), flags = %s}\n", s.Function(), s.Name, flags)
	}
	return b.String(), nil
}

var libLayout = regexp.MustCompile(`(?m)^local LAYOUT = '(\d+)'$`)

// LibLayout returns the layout version lib.lua declares ("" when it declares none).
func LibLayout() string {
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		return ""
	}
	m := libLayout.FindSubmatch(lib)
	if m == nil {
		return ""
	}
	return string(m[1])
}
