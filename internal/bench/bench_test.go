package bench

import (
	"context"
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/simulation/traces"
)

// TestStartChildReadyAndStop: the harness waits for ready lines, returns their submatches, and stops
// the process with SIGTERM; a process that exits first is ErrExited with its log.
func TestStartChildReadyAndStop(t *testing.T) {
	script := `trap 'exit 0' TERM; echo "msg=listening addr=127.0.0.1:4242" >&2; while :; do sleep 0.05; done`
	c, m, err := StartChild("sh", "/bin/sh", []string{"-c", script}, nil, []*regexp.Regexp{ListeningRE}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if m[0][0][1] != "127.0.0.1:4242" {
		t.Errorf("matches %q", m)
	}
	if err := c.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	_, _, err = StartChild("sh", "/bin/sh", []string{"-c", "echo boom >&2; exit 3"}, nil, []*regexp.Regexp{ListeningRE}, time.Minute)
	if !errors.Is(err, ErrExited) || !regexp.MustCompile(`boom`).MatchString(err.Error()) {
		t.Errorf("early exit: %v; want ErrExited with the log", err)
	}
}

// TestIndexTimeline: a tiny trace becomes lookups and events; a pass replays them all.
func TestIndexTimeline(t *testing.T) {
	var reqs []traces.Request
	for i := 0; i < 20; i++ {
		reqs = append(reqs, traces.Request{ArrivalMs: int64(i), InputTokens: 1024, OutputTokens: 1, HashIDs: []uint64{1, uint64(2 + i%3)}})
	}
	tl, err := BuildIndexTimeline(reqs, 2, 16, 1024)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := RunIndex(context.Background(), tl, IndexOptions{Goroutines: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Lookups != 20 || rep.StoredBlocks == 0 || rep.MeanOverlapRatio <= 0 {
		t.Errorf("index report %+v", rep)
	}
	if _, err := BuildIndexTimeline(reqs, 2, 7, 1024); err == nil {
		t.Error("engine block 7 accepted")
	}
}
