package integration

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/simulation/mock"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestMockZMQIngestExact runs `kvrouter mock` (2 engines, small KV caches so the load evicts) and
// `kvrouter ingest` (memory store) as processes over real ZMQ sockets and checks that the index holds
// exactly the blocks each mock's pool holds — after a load with evictions, after dropped event
// messages (replayed), and after one engine restarts (only its index is cleared).
func TestMockZMQIngestExact(t *testing.T) {
	requireIntegration(t)
	_, engines := startMock(t, 2, "--num-blocks", "96", "--speedup", "20", "--max-num-seqs", "4")
	_, ing := startIngest(t, append([]string{"--store", "memory"}, ingestFlags(engines)...)...)
	waitFor(t, 60*time.Second, "subscribers connected", func() string {
		var st []ingest.Stats
		if err := httpJSON("GET", ing+"/v1/ingest/streams", nil, &st); err != nil {
			return err.Error()
		}
		for _, s := range st {
			if !s.Connected {
				return s.Key.String() + " not connected"
			}
		}
		return ""
	})

	// 12 shared prefixes of 4 blocks, each request adds 2 unique blocks and a partial one: 168
	// distinct blocks per engine for 96 slots.
	var prompts [][]uint32
	promptFor := func(i int) []uint32 {
		p := make([]uint32, 0, 104)
		for j := 0; j < 64; j++ {
			p = append(p, uint32(1000+(i%12)*64+j))
		}
		for j := 0; j < 40; j++ {
			p = append(p, uint32(100000+i*64+j))
		}
		return p
	}
	next := 0
	load := func(e mockEngine, n int) {
		t.Helper()
		batch := make([][]uint32, n)
		for i := range batch {
			batch[i] = promptFor(next)
			next++
		}
		prompts = append(prompts, batch...)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		sem := make(chan struct{}, 4)
		for _, p := range batch {
			wg.Add(1)
			sem <- struct{}{}
			go func(p []uint32) {
				defer wg.Done()
				defer func() { <-sem }()
				var out struct {
					Choices []struct{ Text string } `json:"choices"`
				}
				if err := httpJSON("POST", e.HTTP+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 4}, &out); err != nil {
					errs <- err
				} else if len(out.Choices) != 1 {
					errs <- fmt.Errorf("no choice")
				}
			}(p)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	for _, e := range engines {
		load(e, 60)
	}
	for _, e := range engines {
		waitConverged(t, ing, e, prompts)
	}
	st := streamStats(t, ing)
	for _, e := range engines {
		if s := st[e.Name]; s.Applied.RemovedBlocks == 0 || s.Applied.StoredBlocks <= 96 {
			t.Fatalf("%s: want a load with evictions, got %+v", e.Name, s.Applied)
		}
	}

	// Dropped messages: the next live message reveals the gap, the replay fills it.
	w1, w2 := engines[0], engines[1]
	if err := httpJSON("POST", w1.HTTP+"/admin/faults", mock.Faults{DropEvents: 3}, nil); err != nil {
		t.Fatal(err)
	}
	load(w1, 6) // each request publishes at least one message: the drops are consumed…
	var f mock.Faults
	if err := httpJSON("GET", w1.HTTP+"/admin/faults", nil, &f); err != nil || f.DropEvents != 0 {
		t.Fatalf("drops not consumed: %+v %v", f, err)
	}
	load(w1, 3) // …and later messages show the gap
	waitConverged(t, ing, w1, prompts)
	s1 := streamStats(t, ing)[w1.Name]
	if s1.Gaps == 0 || s1.Replays == 0 || s1.ReplayedMessages < 3 || s1.LostMessages != 0 {
		t.Fatalf("w1 after drops: gaps %d replays %d replayed %d lost %d", s1.Gaps, s1.Replays, s1.ReplayedMessages, s1.LostMessages)
	}

	// Restart of w1: fresh engine and sequence; w2's index must not move.
	before2 := workerBlocks(t, ing)[w2.Name]
	reconnects := streamStats(t, ing)[w1.Name].Reconnects
	if err := httpJSON("POST", w1.HTTP+"/admin/restart", nil, nil); err != nil {
		t.Fatal(err)
	}
	// The ingest notices a restart from the next live message after it has reconnected (a real engine
	// publishes continuously), so the load starts once the subscriber is back.
	waitFor(t, 60*time.Second, "w1 subscriber reconnected", func() string {
		if s := streamStats(t, ing)[w1.Name]; s.Reconnects == reconnects || !s.Connected {
			return fmt.Sprintf("reconnects %d connected %v", s.Reconnects, s.Connected)
		}
		return ""
	})
	load(w1, 2)
	waitConverged(t, ing, w1, prompts)
	waitConverged(t, ing, w2, prompts)
	if got := workerBlocks(t, ing)[w2.Name]; got != before2 {
		t.Fatalf("w2 cached blocks changed across w1's restart: %d → %d", before2, got)
	}
	var d mock.BlocksDump
	if err := httpJSON("GET", w1.HTTP+"/debug/blocks", nil, &d); err != nil {
		t.Fatal(err)
	}
	if d.Cached != 2*6 { // two new requests: 4 shared + 2 unique blocks each, nothing else survived
		t.Fatalf("w1 after restart holds %d blocks, want 12", d.Cached)
	}
	st = streamStats(t, ing)
	if st[w1.Name].Restarts == 0 || st[w2.Name].Restarts != 0 {
		t.Fatalf("restarts: w1 %d (want > 0), w2 %d (want 0)", st[w1.Name].Restarts, st[w2.Name].Restarts)
	}
}

// waitConverged waits until the mock is quiescent and the ingest's index of e equals e's block pool:
// the same number of cached blocks, and for every prompt ever sent the same cached prefix depth.
func waitConverged(t *testing.T, ing string, e mockEngine, prompts [][]uint32) {
	t.Helper()
	waitFor(t, 90*time.Second, e.Name+" index equals the mock's pool", func() string {
		var d mock.BlocksDump
		if err := httpJSON("GET", e.HTTP+"/debug/blocks", nil, &d); err != nil {
			return err.Error()
		}
		if !d.Quiescent {
			return "mock not quiescent"
		}
		if got := workerBlocks(t, ing)[e.Name]; got != int64(d.Cached) {
			return fmt.Sprintf("index holds %d blocks, mock %d", got, d.Cached)
		}
		for i, p := range prompts {
			seq := blockhash.Sequence(nil, blockhash.LocalHashes(nil, p, d.BlockSize, blockhash.Seed))
			want := 0
			for _, h := range seq {
				if _, ok := slices.BinarySearch(d.SeqHashes, h); !ok {
					break
				}
				want++
			}
			var ex statestore.Explanation
			if err := httpJSON("POST", ing+"/v1/route/explain", map[string]any{"token_ids": p, "allowed_workers": []string{e.Name}}, &ex); err != nil {
				return err.Error()
			}
			got := 0
			for _, c := range ex.Candidates {
				if c.WorkerID == e.Name {
					got = c.EventBlocks
				}
			}
			if got != want {
				return fmt.Sprintf("prompt %d: index overlap %d, mock cached prefix %d", i, got, want)
			}
		}
		return ""
	})
}

func streamStats(t *testing.T, ing string) map[string]ingest.Stats {
	t.Helper()
	var st []ingest.Stats
	if err := httpJSON("GET", ing+"/v1/ingest/streams", nil, &st); err != nil {
		t.Fatal(err)
	}
	out := map[string]ingest.Stats{}
	for _, s := range st {
		out[s.Key.WorkerID] = s
	}
	return out
}

// workerBlocks returns each worker's cached block count from GET /v1/workers.
func workerBlocks(t *testing.T, url string) map[string]int64 {
	t.Helper()
	var ws struct {
		Workers []statestore.WorkerInfo `json:"workers"`
	}
	if err := httpJSON("GET", url+"/v1/workers", nil, &ws); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, w := range ws.Workers {
		for _, r := range w.Ranks {
			out[w.WorkerID] += r.CachedBlocks
		}
	}
	return out
}
