package chaos

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/simulation/mock"
	"github.com/kvrouter/kvrouter/statestore"
)

// Ports inside the containers (every container has its own address).
const (
	routerPort   = 8080
	ingestPort   = 8081
	mockHTTPPort = 8000
	mockZMQPort  = 5557 // PUB; the replay ROUTER socket is the next port
)

// redis starts a Redis container (the local image: its entrypoint is redis-server) with extra
// arguments after the image's defaults.
func (l *lab) redis(name string, nets []string, extra ...string) *node {
	args := append([]string{"--protected-mode", "no", "--bind", "0.0.0.0", "--save", "", "--appendonly", "no"}, extra...)
	return l.start(name, redisImage(), "Ready to accept connections", nets, args...)
}

// router starts `kvrouter serve` on store with extra flags and waits for /readyz.
func (l *lab) router(name, store string, nets []string, extra ...string) *node {
	l.t.Helper()
	args := append([]string{"serve", "--addr", fmt.Sprintf(":%d", routerPort), "--store", store}, extra...)
	n := l.kvrouter(name, "msg=listening", nets, args...)
	waitReady(l.t, n.url(nets[0], routerPort))
	return n
}

// engine starts `kvrouter mock` with one engine named <name>1 and returns the node and the ingest's
// --engine value for it.
func (l *lab) engine(name string, nets []string, extra ...string) (*node, string) {
	args := append([]string{"mock", "--engines", "1", "--name-prefix", name, "--host", "0.0.0.0",
		"--http-port", fmt.Sprint(mockHTTPPort), "--zmq-port", fmt.Sprint(mockZMQPort)}, extra...)
	n := l.kvrouter(name, "all engines ready", nets, args...)
	spec := fmt.Sprintf("%s1=tcp://%s:%d,replay=tcp://%s:%d,url=http://%s:%d",
		name, name, mockZMQPort, name, mockZMQPort+1, name, mockHTTPPort)
	return n, spec
}

// ingestNode starts `kvrouter ingest` for the engine specs (with extra flags) and waits for /readyz.
func (l *lab) ingestNode(name, store string, nets, engines []string, extra ...string) *node {
	l.t.Helper()
	args := append([]string{"ingest", "--addr", fmt.Sprintf(":%d", ingestPort), "--store", store}, extra...)
	for _, e := range engines {
		args = append(args, "--engine", e)
	}
	n := l.kvrouter(name, "msg=listening", nets, args...)
	waitReady(l.t, n.url(nets[0], ingestPort))
	return n
}

// streamStats reads the ingest's per-worker subscriber statistics.
func streamStats(t *testing.T, ing string) (map[string]ingest.Stats, error) {
	var st []ingest.Stats
	if err := httpJSON("GET", ing+"/v1/ingest/streams", nil, &st); err != nil {
		return nil, err
	}
	out := map[string]ingest.Stats{}
	for _, s := range st {
		out[s.Key.WorkerID] = s
	}
	return out, nil
}

// workersView is GET /v1/workers.
type workersView struct {
	Workers []struct {
		WorkerID string `json:"worker_id"`
		Ranks    []struct {
			ActivePrefillTokens int64 `json:"active_prefill_tokens"`
			ActiveDecodeBlocks  int64 `json:"active_decode_blocks"`
			ActiveRequests      int64 `json:"active_requests"`
			CachedBlocks        int64 `json:"cached_blocks"`
		} `json:"ranks"`
	} `json:"workers"`
}

// workerTotals sums a router's view of every worker's ranks: cached blocks and active requests.
func workerTotals(router string) (cached, active map[string]int64, err error) {
	var v workersView
	if err := httpJSON("GET", router+"/v1/workers", nil, &v); err != nil {
		return nil, nil, err
	}
	cached, active = map[string]int64{}, map[string]int64{}
	for _, w := range v.Workers {
		for _, r := range w.Ranks {
			cached[w.WorkerID] += r.CachedBlocks
			active[w.WorkerID] += r.ActiveRequests + r.ActiveDecodeBlocks + r.ActivePrefillTokens
		}
	}
	return cached, active, nil
}

// promptFor is the i-th prompt of the engine load: 12 shared prefixes of 4 blocks (block size 16), then
// 2 unique blocks and a partial one, so a small KV cache evicts.
func promptFor(i int) []uint32 {
	p := make([]uint32, 0, 104)
	for j := 0; j < 64; j++ {
		p = append(p, uint32(1000+(i%12)*64+j))
	}
	for j := 0; j < 40; j++ {
		p = append(p, uint32(100000+i*64+j))
	}
	return p
}

// engineLoad sends completions straight to a mock engine (what makes it publish KV events) and
// remembers every prompt, for the convergence check.
type engineLoad struct {
	mu      sync.Mutex
	prompts [][]uint32
	next    int
	sent    atomic.Int64
	failed  atomic.Int64
}

// send posts n completions, 4 at a time, to the engine at base; failures are counted, not fatal.
func (g *engineLoad) send(base string, n int) {
	g.mu.Lock()
	batch := make([][]uint32, n)
	for i := range batch {
		batch[i] = promptFor(g.next)
		g.next++
	}
	g.prompts = append(g.prompts, batch...)
	g.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, p := range batch {
		wg.Add(1)
		sem <- struct{}{}
		go func(p []uint32) {
			defer wg.Done()
			defer func() { <-sem }()
			g.sent.Add(1)
			if err := httpJSON("POST", base+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 4}, nil); err != nil {
				g.failed.Add(1)
			}
		}(p)
	}
	wg.Wait()
}

func (g *engineLoad) all() [][]uint32 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.prompts)
}

// waitConverged waits until the mock engine is quiescent and the router's view of worker equals the
// engine's block pool: the same number of cached blocks, and for every prompt ever sent the same
// cached prefix depth (POST /v1/route/explain, restricted to the worker).
func waitConverged(t *testing.T, timeout time.Duration, router, engine, worker string, prompts [][]uint32) {
	t.Helper()
	waitFor(t, timeout, worker+": router's index equals the engine's pool", func() string {
		var d mock.BlocksDump
		if err := httpJSON("GET", engine+"/debug/blocks", nil, &d); err != nil {
			return err.Error()
		}
		if !d.Quiescent {
			return "engine not quiescent"
		}
		cached, _, err := workerTotals(router)
		if err != nil {
			return err.Error()
		}
		if cached[worker] != int64(d.Cached) {
			return fmt.Sprintf("router sees %d cached blocks, engine holds %d", cached[worker], d.Cached)
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
			if err := httpJSON("POST", router+"/v1/route/explain", map[string]any{"token_ids": p, "allowed_workers": []string{worker}}, &ex); err != nil {
				return err.Error()
			}
			got := 0
			for _, c := range ex.Candidates {
				if c.WorkerID == worker {
					got = c.EventBlocks
				}
			}
			if got != want {
				return fmt.Sprintf("prompt %d: router overlap %d, engine's cached prefix %d", i, got, want)
			}
		}
		return ""
	})
}
