package statestore_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestRedisReplayIdentical runs every committed replay file on the memory store and on Redis and
// requires byte-identical output (SPEC §7.1).
func TestRedisReplayIdentical(t *testing.T) {
	srv := sharedRedis(t)
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
			var want, got bytes.Buffer
			if err := core.Replay(context.Background(), statestore.NewMemory(), bytes.NewReader(in), &want); err != nil {
				t.Fatal(err)
			}
			if err := core.Replay(context.Background(), newRedisStore(t, srv.Addr()), bytes.NewReader(in), &got); err != nil {
				t.Fatal(err)
			}
			diffLines(t, want.String(), got.String())
		})
	}
}

func diffLines(t *testing.T, want, got string) {
	t.Helper()
	if want == got {
		return
	}
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(gl) && i < len(wl); i++ {
		if gl[i] != wl[i] {
			t.Fatalf("output line %d differs:\n memory %s\n redis  %s", i+1, wl[i], gl[i])
		}
	}
	t.Fatalf("memory printed %d lines, redis %d", len(wl), len(gl))
}
