package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestHelpExitsZero runs `kvrouter --help`, every command's --help and every benchmark's --help: each
// must exit 0 and print its usage to stdout.
func TestHelpExitsZero(t *testing.T) {
	defer func(w io.Writer) { stdout = w }(stdout)
	cases := [][]string{{"--help"}, {"-h"}, {"help"}}
	for name := range commands {
		cases = append(cases, []string{name, "--help"}, []string{name, "-h"})
	}
	for _, group := range []struct {
		name string
		cmds map[string]command
	}{{"bench", benchCommands}, {"index", indexCommands}, {"pool", poolCommands}} {
		for name := range group.cmds {
			cases = append(cases, []string{group.name, name, "--help"})
		}
	}
	for _, args := range cases {
		var out bytes.Buffer
		stdout = &out
		code := run(context.Background(), args)
		if code != 0 {
			t.Errorf("kvrouter %s: exit status %d, want 0", strings.Join(args, " "), code)
		}
		if !strings.Contains(out.String(), "Usage: kvrouter") {
			t.Errorf("kvrouter %s: stdout %q has no usage", strings.Join(args, " "), out.String())
		}
	}
}

// TestBadFlagExitsTwo: an unknown flag is a usage error (exit 2), not a failure (1) nor help (0).
func TestBadFlagExitsTwo(t *testing.T) {
	for name := range commands {
		if code := run(context.Background(), []string{name, "--no-such-flag"}); code != 2 {
			t.Errorf("kvrouter %s --no-such-flag: exit status %d, want 2", name, code)
		}
	}
}
