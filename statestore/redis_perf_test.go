package statestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestRedisPerfHarness is a manual profiling harness (skipped unless KVR_PERF_ADDR is set): it loads the
// same synthetic index as `kvrouter bench route` (chains of 64 random blocks, each on one worker) into
// the Redis at KVR_PERF_ADDR under a fixed prefix (once; reused while the prefix exists), then runs
// sequential routes and prints Redis µs per EVALSHA from INFO commandstats.
// KVR_PERF_WORKERS (64), KVR_PERF_BLOCKS (1000000), KVR_PERF_ROUTES (2000), KVR_PERF_PREFIX (perf:).
func TestRedisPerfHarness(t *testing.T) {
	addr := os.Getenv("KVR_PERF_ADDR")
	if addr == "" {
		t.Skip("KVR_PERF_ADDR not set")
	}
	env := func(k string, d int) int {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
			return v
		}
		return d
	}
	workers, blocks, routes := env("KVR_PERF_WORKERS", 64), env("KVR_PERF_BLOCKS", 1000000), env("KVR_PERF_ROUTES", 2000)
	prefix := os.Getenv("KVR_PERF_PREFIX")
	if prefix == "" {
		prefix = fmt.Sprintf("perf%d-%d:", workers, blocks)
	}
	ctx := context.Background()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, ConnWriteTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st, err := statestore.NewRedis(c, statestore.RedisOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const pool, bs = "bench", 16
	r := rand.New(rand.NewPCG(7, 7))
	var chains [][]uint64
	for i := 0; i < blocks/64; i++ {
		ch := make([]uint64, 64)
		for j := range ch {
			ch[j] = r.Uint64()
		}
		chains = append(chains, ch)
	}
	wid := func(i int) string { return fmt.Sprintf("w%04d", i) }
	if _, err := st.GetPool(ctx, pool); err != nil {
		if err := st.PutPool(ctx, pool, statestore.DefaultPoolConfig(bs)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < workers; i++ {
			if err := st.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: wid(i), URL: "http://" + wid(i)}, 0); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		resetStats(ctx, c)
		var wg sync.WaitGroup
		for cl := 0; cl < 8; cl++ {
			wg.Add(1)
			go func(cl int) {
				defer wg.Done()
				for w := cl; w < workers; w += 8 {
					var evs []statestore.Event
					id := uint64(0)
					for i, ch := range chains {
						if i%workers != w {
							continue
						}
						id++
						ev := statestore.Event{Kind: statestore.EventStored, HasEventID: true, EventID: id}
						seq := blockhash.Sequence(nil, ch)
						for j, l := range ch {
							ev.Blocks = append(ev.Blocks, statestore.StoredBlock{EngineHash: seq[j] ^ uint64(w+1)<<48, LocalHash: l})
						}
						evs = append(evs, ev)
						if len(evs) == 16 {
							if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: pool, WorkerID: wid(w), Events: evs}); err != nil {
								t.Error(err)
								return
							}
							evs = evs[:0]
						}
					}
					if len(evs) > 0 {
						if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: pool, WorkerID: wid(w), Events: evs}); err != nil {
							t.Error(err)
						}
					}
				}
			}(cl)
		}
		wg.Wait()
		t.Logf("load: %d blocks in %v (%.0f blocks/s wall); %s", blocks, time.Since(t0), float64(blocks)/time.Since(t0).Seconds(), cmdStats(ctx, c))
	}
	resetStats(ctx, c)
	c.Do(ctx, c.B().Del().Key("prof").Build())
	t0 := time.Now()
	for i := 0; i < routes; i++ {
		ch := chains[r.IntN(len(chains))]
		local := ch
		if r.IntN(2) == 0 {
			local = append([]uint64(nil), ch...)
			local[r.IntN(len(local))] ^= 1
		}
		seq := blockhash.Sequence(nil, local)
		req := statestore.RouteRequest{Pool: pool, RequestID: fmt.Sprintf("p%d-%d", time.Now().UnixNano(), i), SeqHashes: seq,
			ISL: int64(len(seq) * bs), Random: r.Float64(), NowMs: time.Now().UnixMilli()}
		if _, err := st.Route(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	el := time.Since(t0)
	prof, _ := c.Do(ctx, c.B().Hgetall().Key("prof").Build()).AsStrMap()
	t.Logf("routes: %d in %v; %s; prof(total µs)=%v", routes, el, cmdStats(ctx, c), prof)
}

func resetStats(ctx context.Context, c rueidis.Client) {
	c.Do(ctx, c.B().ConfigResetstat().Build())
}

func cmdStats(ctx context.Context, c rueidis.Client) string {
	s, _ := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	var out []string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "cmdstat_eval") {
			out = append(out, line)
		}
	}
	return strings.Join(out, " | ")
}
