package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
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
