package eventlog

import (
	"context"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

const testBlockSize = 4

func readSmall(t *testing.T) *Log {
	t.Helper()
	f, err := os.Open("testdata/small.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := Read(f, "default", testBlockSize)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestApplyStatsQuery: the small log (RouterEvents and captured msgpack messages) loads into the
// embedded store; the offline statistics agree with the store's block counts; overlap queries answer
// the expected depths.
func TestApplyStatsQuery(t *testing.T) {
	ctx := context.Background()
	l := readSmall(t)
	if l.Events != 10 || len(l.Skipped) != 0 {
		t.Fatalf("read %d events, skipped %v; want 10, none", l.Events, l.Skipped)
	}
	st := statestore.NewMemory()
	res, err := Apply(ctx, st, "default", testBlockSize, l)
	if err != nil {
		t.Fatal(err)
	}
	if res.ParentNotFound != 1 || res.Stale != 1 || res.BlockSizeMismatch != 1 {
		t.Errorf("apply result %+v; want 1 unknown parent, 1 stale, 1 block size mismatch", res)
	}
	got, err := StoreBlocks(ctx, st, "default")
	if err != nil {
		t.Fatal(err)
	}
	want := []RankBlocks{{"w1", 0, 2}, {"w2", 0, 2}, {"w3", 0, 3}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("store blocks %+v, want %+v", got, want)
	}
	stats := Stats(l, testBlockSize)
	if len(stats) != len(want) {
		t.Fatalf("stats %+v", stats)
	}
	for i, s := range stats {
		if s.WorkerID != want[i].WorkerID || int64(s.Blocks) != want[i].Blocks {
			t.Errorf("stats %+v disagree with the store's %+v", s, want[i])
		}
	}
	w3 := stats[2]
	wantDepths := []DepthBucket{{1, 1, 1}, {2, 3, 2}}
	if w3.MaxDepth != 3 || !reflect.DeepEqual(w3.Depths, wantDepths) || w3.Dropped != 1 {
		t.Errorf("w3 stats %+v; want max depth 3, depths %v, 1 dropped", w3, wantDepths)
	}

	scores, err := Query(ctx, st, "default", LocalHashes([]uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, testBlockSize))
	if err != nil {
		t.Fatal(err)
	}
	wantScores := []statestore.Score{{WorkerID: "w1", Blocks: 2}, {WorkerID: "w2", Blocks: 2}, {WorkerID: "w3", Blocks: 3}}
	if !reflect.DeepEqual(scores, wantScores) {
		t.Errorf("overlap %+v, want %+v", scores, wantScores)
	}
}

// TestReadErrors: a syntax error is fatal and names the line; an unusable event is skipped and listed.
func TestReadErrors(t *testing.T) {
	if _, err := Read(strings.NewReader("{\"worker_id\":\"w1\"}\nnot json\n"), "p", 4); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("syntax error: %v; want one naming line 2", err)
	}
	l, err := Read(strings.NewReader(`{"worker_id":"w1","storage_tier":"tape","event":{"data":"cleared"}}`+"\n"+
		`{"worker_id":"w1","seq":1,"payload":"AAAA"}`+"\n"), "p", 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Skipped) != 2 || !strings.Contains(l.Skipped[0], "line 1") || !strings.Contains(l.Skipped[1], "payload") {
		t.Errorf("skipped %q; want line 1 (tier) and line 2 (payload)", l.Skipped)
	}
	if _, err := Read(strings.NewReader(""), "p", 0); err == nil {
		t.Error("block size 0 accepted")
	}
}
