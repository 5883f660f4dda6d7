package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestGeneratedFilesFresh re-renders knobs_gen.lua and docs/API.md's knob table from the Go table and
// compares bytes with the committed files: a knob or filter reason changed without `go generate
// ./statestore` fails here.
func TestGeneratedFilesFresh(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	lua, err := os.ReadFile(filepath.Join(root, luaPath))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(lua, renderLua()) {
		t.Errorf("%s is stale: run go generate ./statestore", luaPath)
	}
	docs, err := os.ReadFile(filepath.Join(root, docsPath))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := spliceDocs(docs)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(docs, fresh) {
		t.Errorf("%s's knob table is stale: run go generate ./statestore", docsPath)
	}
}

// TestLuaUsesGeneratedNames: outside knobs_gen.lua no script code spells a filter reason or a knob's
// short name as a string literal (they use R_<REASON>, cfg.<short> and CFG_FIELDS), so renaming one in
// the Go table cannot leave a stale copy in Lua. put_pool.lua's 'bs' (the block size conflict check) is
// the one exception.
func TestLuaUsesGeneratedNames(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(root, "luascripts", "*.lua"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	var names []string
	for _, k := range statestore.Knobs() {
		names = append(names, k.Short)
	}
	names = append(names, statestore.FilterReasons()...)
	for _, p := range paths {
		base := filepath.Base(p)
		if base == filepath.Base(luaPath) {
			continue
		}
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			code, _, _ := strings.Cut(line, "--")
			for _, n := range names {
				if base == "put_pool.lua" && n == "bs" {
					continue
				}
				if strings.Contains(code, "'"+n+"'") || strings.Contains(code, `"`+n+`"`) {
					t.Errorf("%s:%d spells %q; use the generated name", base, i+1, n)
				}
			}
		}
	}
}
