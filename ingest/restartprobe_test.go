package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/simulation/mock"
	"github.com/kvrouter/kvrouter/statestore"
)

// cachedBlocks is the store's block count for the worker's rank 0.
func cachedBlocks(t *testing.T, store statestore.Store, worker string) int {
	t.Helper()
	ws, err := store.Workers(context.Background(), "default", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.WorkerID == worker && len(w.Ranks) > 0 {
			return int(w.Ranks[0].CachedBlocks)
		}
	}
	t.Fatalf("worker %s not found", worker)
	return 0
}

func memoryStoreWith(t *testing.T, blockSize int, workers ...string) statestore.Store {
	t.Helper()
	ctx := context.Background()
	store := statestore.NewMemory()
	if err := store.PutPool(ctx, "default", statestore.DefaultPoolConfig(blockSize)); err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if err := store.PutWorker(ctx, "default", statestore.WorkerSpec{WorkerID: w, URL: "http://" + w, DPSize: 1}, 0); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// TestIdleRestartClearsIndex: a mock engine (kvrouter mock: real HTTP, real ZMQ PUB and replay
// sockets) caches a prompt, then restarts and stays silent. Its index is cleared without any new
// message: the subscriber reconnects and probes the replay socket, which no longer holds the last
// applied message. The bound is RestartProbeInterval after the reconnect (here the probe runs at the
// reconnect itself); the test polls the store with a deadline.
func TestIdleRestartClearsIndex(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := mock.Start(ctx, mock.Config{Name: "m0", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	store := memoryStoreWith(t, 16, "m0")
	cfg := testConfig(nil)
	cfg.WorkerID, cfg.BlockSize = "m0", 16
	cfg.Endpoint, cfg.ReplayEndpoint = srv.EventsAddr(), srv.ReplayAddr()
	cfg.RestartProbeInterval = 200 * time.Millisecond
	sub, _ := runSubscriber(t, cfg, store)

	// A prompt of 8 full blocks; the slow joiner may miss the live events, the reconnect-free path
	// then recovers them at the next message — so keep asking until the store holds the blocks.
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog ", 40)
	eventually(t, waitLong, "the prompt's blocks indexed", func() bool {
		body, _ := json.Marshal(map[string]any{"prompt": prompt, "max_tokens": 1})
		resp, err := http.Post(srv.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return cachedBlocks(t, store, "m0") >= 8
	})
	before := sub.Stats()

	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The engine publishes nothing from here on.
	eventually(t, waitLong, "the restarted engine's index cleared", func() bool {
		return cachedBlocks(t, store, "m0") == 0
	})
	st := sub.Stats()
	if st.Restarts != before.Restarts+1 || st.Messages != before.Messages || st.RestartProbes == 0 {
		t.Fatalf("stats before %+v after %+v", before, st)
	}
}

// TestIdleProbeOnLiveConnection: the PUB connection stays up and silent while the engine behind the
// replay socket starts over (a restart the subscriber's connection did not see, e.g. behind a
// proxy): the periodic idle probe finds the last applied message gone and clears the index, within
// RestartProbeInterval. A probe answered with the same message changes nothing.
func TestIdleProbeOnLiveConnection(t *testing.T) {
	live := startPublisher(t, "", "", 0)
	replayA := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	store := memoryStoreWith(t, 4, "w0")
	cfg := testConfig(live)
	cfg.ReplayEndpoint = replayA.ReplayAddr()
	cfg.RestartProbeInterval = 50 * time.Millisecond
	sub, _ := runSubscriber(t, cfg, store)
	live.waitSubscribed()
	for m := uint64(0); m < 3; m++ { // the replay socket holds what was published live
		p := payload(t, m)
		if _, err := live.Publish(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		if _, err := replayA.PublishLost(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, waitLong, "3 blocks indexed", func() bool { return cachedBlocks(t, store, "w0") == 3 })
	eventually(t, waitLong, "two idle probes", func() bool { return sub.Stats().RestartProbes >= 2 })
	if st := sub.Stats(); st.Restarts != 0 || cachedBlocks(t, store, "w0") != 3 {
		t.Fatalf("a probe of a live engine changed something: %+v", st)
	}

	replayA.Close()
	startPublisher(t, "", replayA.ReplayAddr(), 0) // the engine started over: empty buffer
	eventually(t, waitLong, "index cleared by the idle probe", func() bool { return cachedBlocks(t, store, "w0") == 0 })
	if st := sub.Stats(); st.Restarts != 1 || st.Reconnects != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The next live message (seq 3 of the publisher the subscriber sees) opens the new epoch's
	// history: it applies on the cleared rank.
	live.publish(3)
	eventually(t, waitLong, "the next message applied", func() bool { return cachedBlocks(t, store, "w0") == 1 })
}
