package statestore_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// registerFleet registers n workers (ids f00000…, dp sizes 1..dp cycling) from 16 goroutines.
func registerFleet(tb testing.TB, st statestore.Store, pool string, n, dp int) {
	tb.Helper()
	ctx := context.Background()
	if err := st.PutPool(ctx, pool, statestore.DefaultPoolConfig(16)); err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for c := 0; c < 16; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := c; i < n; i += 16 {
				spec := statestore.WorkerSpec{WorkerID: fmt.Sprintf("f%05d", i), URL: fmt.Sprintf("http://10.0.%d.%d:8000", i/256, i%256),
					DPSize: 1 + i%dp, TotalKVBlocks: 1000}
				if err := st.PutWorker(ctx, pool, spec, 1); err != nil {
					errs <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// BenchmarkRedisWorkersPage (issue 15): one GET /v1/workers page (Store.ListWorkers, one workers.lua call)
// in a pool of 4,096 workers, per page size and dp size, paging round and round the fleet (limit 1000 is
// the largest page the API allows: MaxWorkersPageRanks ranks). Reports the
// server's CPU per page (INFO used_cpu delta: SPEC §9's rule) and per listed rank, the FCALL time per page
// (commandstats) and the SLOWLOG entries over 1 ms logged during the run (the server is the benchmark's
// own). The box's load changes all three: say it with the numbers (docs/PERFORMANCE.md).
//
//	go test ./statestore -run '^$' -bench RedisWorkersPage -benchtime 200x -count 3
func BenchmarkRedisWorkersPage(b *testing.B) {
	const workers = 4096
	srv := sharedRedis(b)
	st := newRedisStore(b, srv.Addr())
	ctx := context.Background()
	for _, dp := range []int{1, 8} {
		pool := "fleet-dp" + strconv.Itoa(dp)
		registerFleet(b, st, pool, workers, dp)
		ranks := 0
		for i := 0; i < workers; i++ {
			ranks += 1 + i%dp
		}
		for _, limit := range []int{statestore.DefaultWorkersPage, statestore.MaxWorkersPage} {
			b.Run(fmt.Sprintf("dp=1..%d/limit=%d", dp, limit), func(b *testing.B) {
				if _, err := st.ListWorkers(ctx, pool, statestore.WorkersQuery{Limit: limit}, 2); err != nil { // roster memo warm
					b.Fatal(err)
				}
				for _, cmd := range [][]string{{"CONFIG", "SET", "slowlog-log-slower-than", "1000"}, {"SLOWLOG", "RESET"}} {
					if _, err := srv.Do(10e9, cmd...); err != nil {
						b.Fatal(err)
					}
				}
				cpu0, _ := st.InfoCPU(ctx)
				calls0, usec0, _ := st.CommandStats(ctx, "fcall")
				q, listed := statestore.WorkersQuery{Limit: limit}, 0
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					pg, err := st.ListWorkers(ctx, pool, q, 2)
					if err != nil {
						b.Fatal(err)
					}
					for _, w := range pg.Workers {
						listed += len(w.Ranks)
					}
					q.After = pg.Next
				}
				b.StopTimer()
				cpu1, _ := st.InfoCPU(ctx)
				calls1, usec1, _ := st.CommandStats(ctx, "fcall")
				slow, _ := srv.Do(10e9, "SLOWLOG", "LEN")
				nslow, _ := strconv.Atoi(slow)
				b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-us/page")
				b.ReportMetric((cpu1-cpu0)*1e6/float64(max(listed, 1)), "redis-cpu-us/rank")
				b.ReportMetric((usec1-usec0)/max(calls1-calls0, 1), "fcall-us/page")
				b.ReportMetric(float64(nslow), "slowlog>1ms")
				b.ReportMetric(float64(listed)/float64(b.N), "ranks/page")
			})
		}
	}
}

// BenchmarkRedisRescore (issue 15): PutPool changing prefill_load_scale (× 1.5, then back: two rescorings
// of the load order per iteration) in a pool of 4,096 single-rank workers with varied loads (4,096
// bookings of 0..96 prompt tokens). Reports, from the SLOWLOG (threshold 0, the benchmark's own
// server), the longest single call of a PutPool (the largest over the run, the median and the least over
// its PutPools: the box's preemption shows in the first two), the median FCALL, the FCALLs per PutPool and
// their summed duration. Also compiles in a tree without the
// rescoring in steps, where one put_pool call does all of it (the "before" of docs/PERFORMANCE.md).
//
//	go test ./statestore -run '^$' -bench RedisRescore -benchtime 10x -count 3
func BenchmarkRedisRescore(b *testing.B) {
	const workers = 4096
	srv := sharedRedis(b)
	st := newRedisStore(b, srv.Addr())
	ctx := context.Background()
	registerFleet(b, st, "rescore", workers, 1)
	for i := 0; i < workers; i++ {
		req := statestore.RouteRequest{Pool: "rescore", RequestID: fmt.Sprintf("r%d", i), ISL: int64(16 * (i % 7)), Random: float64(i%97) / 97, NowMs: 2}
		if _, err := st.Route(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	for _, cmd := range [][]string{{"CONFIG", "SET", "slowlog-log-slower-than", "0"}, {"CONFIG", "SET", "slowlog-max-len", "100000"}, {"SLOWLOG", "RESET"}} {
		if _, err := srv.Do(10e9, cmd...); err != nil {
			b.Fatal(err)
		}
	}
	cfgs := [2]statestore.PoolConfig{statestore.DefaultPoolConfig(16), statestore.DefaultPoolConfig(16)}
	cfgs[0].PrefillLoadScale *= 1.5
	var longest, all []float64
	usec := int64(0)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, cfg := range cfgs {
			mark, err := st.MarkSlowlog(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := st.PutPool(ctx, "rescore", cfg); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			s, err := st.SlowlogSince(ctx, mark, "{")
			if err != nil || s.Truncated || s.Logged > statestore.MaxSlowlogEntries {
				b.Fatalf("slowlog: %+v (%v)", s, err)
			}
			top := int64(0)
			for _, e := range s.Entries {
				if strings.HasPrefix(e.Command, "FCALL") {
					all = append(all, float64(e.Us))
					usec += e.Us
					top = max(top, e.Us)
				}
			}
			if testing.Verbose() && i == 0 {
				for _, e := range s.Entries {
					b.Logf("%s %d µs", e.Command, e.Us)
				}
			}
			longest = append(longest, float64(top))
			b.StartTimer()
		}
	}
	b.StopTimer()
	slices.Sort(longest)
	slices.Sort(all)
	b.ReportMetric(longest[len(longest)-1], "longest-call-us")
	b.ReportMetric(longest[len(longest)/2], "median-longest-call-us")
	b.ReportMetric(longest[0], "least-longest-call-us")
	b.ReportMetric(all[len(all)/2], "median-call-us")
	b.ReportMetric(float64(len(all))/float64(len(longest)), "fcalls/putpool")
	b.ReportMetric(float64(usec)/float64(len(longest)), "fcall-us/putpool")
}
