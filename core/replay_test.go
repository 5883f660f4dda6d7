package core

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

var update = flag.Bool("update", false, "rewrite testdata/replay/*.expected from the memory store")

// TestReplayGolden runs every committed replay file against the memory store and compares the output
// with its .expected file (reviewed by hand against SPEC §5 and §6).
func TestReplayGolden(t *testing.T) {
	files, err := filepath.Glob("../testdata/replay/*.jsonl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no replay files: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			in, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := Replay(context.Background(), statestore.NewMemory(), bytes.NewReader(in), &out); err != nil {
				t.Fatal(err)
			}
			exp := strings.TrimSuffix(f, ".jsonl") + ".expected"
			if *update {
				if err := os.WriteFile(exp, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(exp)
			if err != nil {
				t.Fatalf("missing %s (run with -update after checking the output by hand): %v", exp, err)
			}
			if !bytes.Equal(out.Bytes(), want) {
				gl, wl := strings.Split(out.String(), "\n"), strings.Split(string(want), "\n")
				for i := 0; i < len(gl) && i < len(wl); i++ {
					if gl[i] != wl[i] {
						t.Fatalf("output line %d differs:\n got  %s\n want %s", i+1, gl[i], wl[i])
					}
				}
				t.Fatalf("output has %d lines, want %d", len(gl), len(wl))
			}
		})
	}
}
