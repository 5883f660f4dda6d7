package main

import (
	"bytes"
	"context"
	"os"
	"testing"
)

func capture(t *testing.T, f func() error) string {
	t.Helper()
	var buf bytes.Buffer
	old := stdout
	stdout = &buf
	defer func() { stdout = old }()
	if err := f(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestHashCommandSpecVectors checks SPEC §3's vectors through `kvrouter hash`.
func TestHashCommandSpecVectors(t *testing.T) {
	got := capture(t, func() error {
		return runHash(context.Background(), []string{"--block-size", "4", "--tokens", "1,2,3,4,5,6,7,8,9,10,11,12,13"})
	})
	want := `{"local":[14643705804678351452,16777012769546811212,483935686894639516],"seq":[14643705804678351452,4945711292740353085,12583592247330656132]}` + "\n"
	if got != want {
		t.Fatalf("kvrouter hash printed\n%s\nwant\n%s", got, want)
	}
	if got := capture(t, func() error { return runHash(context.Background(), []string{"--block-size", "4", "--tokens", "1,2,3"}) }); got != `{"local":[],"seq":[]}`+"\n" {
		t.Fatalf("partial block: %s", got)
	}
}

// TestReplayCommandMatchesGolden runs a committed replay file through `kvrouter replay`.
func TestReplayCommandMatchesGolden(t *testing.T) {
	got := capture(t, func() error {
		return runReplay(context.Background(), []string{"../../testdata/replay/index_scenarios.jsonl"})
	})
	want, err := os.ReadFile("../../testdata/replay/index_scenarios.expected")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("replay output differs from the golden file")
	}
}
