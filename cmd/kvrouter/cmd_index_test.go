package main

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/kvrouter/kvrouter/eventlog"
	"github.com/kvrouter/kvrouter/statestore"
)

const smallLog = "../../eventlog/testdata/small.jsonl"

// TestIndexApplyQuery: `kvrouter index apply` loads the committed log, prints the per-worker block
// counts and answers --query with token ids and --query-hashes with the same blocks' local hashes.
func TestIndexApplyQuery(t *testing.T) {
	tokens := "1,2,3,4,5,6,7,8,9,10,11,12"
	hashes := capture(t, func() error {
		return runHash(context.Background(), []string{"--block-size", "4", "--tokens", tokens})
	})
	var h struct{ Local []uint64 }
	if err := json.Unmarshal([]byte(hashes), &h); err != nil {
		t.Fatal(err)
	}
	hashArg := ""
	for i, v := range h.Local {
		if i > 0 {
			hashArg += ","
		}
		hashArg += strconv.FormatUint(v, 10)
	}
	for _, q := range [][]string{{"--query", tokens}, {"--query-hashes", hashArg}} {
		out := capture(t, func() error {
			return runIndexApply(context.Background(), append([]string{smallLog, "--block-size", "4"}, q...))
		})
		var got struct {
			Events  int
			Workers []eventlog.RankBlocks
			Overlap []statestore.Score
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %v\n%s", q, err, out)
		}
		if got.Events != 10 || len(got.Workers) != 3 || got.Workers[2].Blocks != 3 {
			t.Errorf("%v: events %d workers %+v; want 10 events, w3 with 3 blocks", q, got.Events, got.Workers)
		}
		if len(got.Overlap) != 3 || got.Overlap[0].Blocks != 2 || got.Overlap[2].Blocks != 3 {
			t.Errorf("%v: overlap %+v; want w1 2, w2 2, w3 3", q, got.Overlap)
		}
	}
}

// TestIndexStats: `kvrouter index stats` prints block counts and depth histograms per worker.
func TestIndexStats(t *testing.T) {
	out := capture(t, func() error {
		return runIndexStats(context.Background(), []string{"--block-size", "4", smallLog})
	})
	var got struct{ Workers []eventlog.RankStats }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Workers) != 3 || got.Workers[2].MaxDepth != 3 || len(got.Workers[2].Depths) != 2 {
		t.Errorf("stats %+v", got.Workers)
	}
}
