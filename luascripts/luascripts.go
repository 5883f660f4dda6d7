// Package luascripts embeds kvrouter's Redis Lua scripts: one file per atomic operation, each starting
// with a header (KEYS, ARGV with units, reply shape, complexity). lib.lua holds helpers shared by all of
// them and knobs_gen.lua the pool knobs and filter reasons, generated from statestore's knob table
// (`go generate ./statestore`); Source prepends both, so every operation is still one self-contained
// EVALSHA call.
package luascripts

import (
	"embed"
	"fmt"
)

//go:embed *.lua
var files embed.FS

// Names lists the operations (script files without ".lua"), lib excluded.
var Names = []string{"apply_events", "resolve_parents", "route", "lease", "put_pool", "put_worker", "remove_worker", "workers", "report_forward"}

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

// Source returns the full text of one operation: Prelude, then the operation's file.
func Source(name string) (string, error) {
	body, err := files.ReadFile(name + ".lua")
	if err != nil {
		return "", fmt.Errorf("luascripts: no script %q", name)
	}
	return Prelude() + "\n" + string(body), nil
}
