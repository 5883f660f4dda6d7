// Package luascripts embeds kvrouter's Redis Lua scripts: one file per atomic operation, each starting
// with a header (KEYS, ARGV with units, reply shape, complexity). lib.lua holds helpers shared by all of
// them; Source prepends it, so every operation is still one self-contained EVALSHA call.
package luascripts

import (
	"embed"
	"fmt"
)

//go:embed *.lua
var files embed.FS

// Names lists the operations (script files without ".lua"), lib excluded.
var Names = []string{"apply_events", "resolve_parents", "route", "lease", "put_pool", "put_worker", "remove_worker", "workers", "report_forward"}

// Source returns the full text of one operation: lib.lua followed by the operation's file.
func Source(name string) (string, error) {
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		return "", err
	}
	body, err := files.ReadFile(name + ".lua")
	if err != nil {
		return "", fmt.Errorf("luascripts: no script %q", name)
	}
	return string(lib) + "\n" + string(body), nil
}
