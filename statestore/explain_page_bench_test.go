package statestore_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// BenchmarkRedisExplainFleet (issue 15, SPEC §8): one Explain in a pool of 4,096 single-rank workers (a
// 1-block prompt held by 64 of them, ISL 64, loads from 300 routes), in one call (page = the whole
// roster: the explain before paging) and paged (ExplainPageCandidates), at temperature 0 and 0.5. Per
// explain: the longest script call and the sum of its calls (SLOWLOG of every call, µs: Redis's own
// timing of each FCALL), the number of calls, and the server's CPU (INFO used_cpu delta, including the
// GetPool that reads the knobs and the SLOWLOG reads). The longest-call figure is the median over the
// b.N explains (and its least: the least-preempted explain); paged, also the median head call and the
// median and least page call. The server is the benchmark's own.
//
//	go test ./statestore -run '^$' -bench RedisExplainFleet -benchtime 20x -count 3
func BenchmarkRedisExplainFleet(b *testing.B) {
	const workers = 4096
	srv := sharedRedis(b)
	st := newRedisStore(b, srv.Addr())
	ctx := context.Background()
	registerFleet(b, st, "p", workers, 1)
	seq := blockhash.Sequence(nil, []uint64{7})
	for i := 0; i < 64; i++ {
		ev := statestore.Event{Kind: statestore.EventStored, Blocks: []statestore.StoredBlock{{EngineHash: uint64(1000 + i), LocalHash: 7}}}
		if _, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: "p", WorkerID: fmt.Sprintf("f%05d", i*61), Events: []statestore.Event{ev}, NowMs: 1}); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < 300; i++ {
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("l%d", i), SeqHashes: seq, ISL: 64, Random: float64(i%10) / 10, NowMs: 1}
		if _, err := st.Route(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	do := func(args ...string) rueidis.RedisResult { return c.Do(ctx, c.B().Arbitrary(args...).Build()) }
	for _, cmd := range [][]string{{"CONFIG", "SET", "slowlog-log-slower-than", "0"}, {"CONFIG", "SET", "slowlog-max-len", "10000"}} {
		if err := do(cmd...).Error(); err != nil {
			b.Fatal(err)
		}
	}
	for _, temp := range []float64{0, 0.5} {
		for _, page := range []int{1 << 30, statestore.ExplainPageCandidates} {
			name := fmt.Sprintf("temp=%g/one-call", temp)
			if page < 1<<30 {
				name = fmt.Sprintf("temp=%g/paged-%d", temp, page)
			}
			b.Run(name, func(b *testing.B) {
				statestore.SetExplainPaging(st, page, nil)
				t := temp
				req := statestore.RouteRequest{Pool: "p", RequestID: "x", SeqHashes: seq, ISL: 64, Random: 0.5, NowMs: 2}
				req.Overrides.Temperature = &t
				if _, err := st.Explain(ctx, req); err != nil { // memos warm
					b.Fatal(err)
				}
				var longest, heads, pages []float64
				var sum, calls float64
				cpu0, _ := st.InfoCPU(ctx)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := do("SLOWLOG", "RESET").Error(); err != nil {
						b.Fatal(err)
					}
					if _, err := st.Explain(ctx, req); err != nil {
						b.Fatal(err)
					}
					entries, err := do("SLOWLOG", "GET", "10000").ToArray()
					if err != nil {
						b.Fatal(err)
					}
					m, first := 0.0, len(pages)
					for _, e := range entries { // newest first: the explain's first call (the head) is the last
						f, _ := e.ToArray()
						args, _ := f[3].AsStrSlice()
						if len(args) == 0 || (args[0] != "FCALL" && args[0] != "fcall") {
							continue
						}
						us, _ := f[2].AsInt64()
						m = max(m, float64(us))
						sum += float64(us)
						calls++
						pages = append(pages, float64(us))
					}
					longest = append(longest, m)
					if len(pages) > first+1 { // paged: the oldest call was the head
						heads = append(heads, pages[len(pages)-1])
						pages = pages[:len(pages)-1]
					} else {
						pages = pages[:first]
					}
				}
				b.StopTimer()
				cpu1, _ := st.InfoCPU(ctx)
				slices.Sort(longest)
				if len(heads) > 0 {
					slices.Sort(heads)
					slices.Sort(pages)
					b.ReportMetric(heads[len(heads)/2], "head-us")
					b.ReportMetric(pages[len(pages)/2], "page-us")
					b.ReportMetric(pages[0], "page-min-us")
				}
				b.ReportMetric(longest[len(longest)/2], "longest-call-us")
				b.ReportMetric(longest[len(longest)-1], "longest-call-max-us")
				b.ReportMetric(longest[0], "longest-call-min-us")
				b.ReportMetric(sum/float64(b.N), "fcall-sum-us/explain")
				b.ReportMetric(calls/float64(b.N), "calls/explain")
				b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-us/explain")
			})
		}
	}
}
