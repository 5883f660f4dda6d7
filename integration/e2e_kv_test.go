package integration

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/internal/testredis"
)

// TestE2EKVBeatsRoundRobin runs the whole system on one machine as real processes — 4 mock engines,
// `kvrouter ingest` and `kvrouter serve` sharing one Redis — and sends a prefix-heavy workload through
// route → mock → done with the `kvrouter bench e2e` driver (bench.RunE2E), then the same workload round-robin on restarted
// engines. Only the direction of the hit rate (measured by the engines) is asserted; TTFT is reported
// in docs/EVALUATION.md.
func TestE2EKVBeatsRoundRobin(t *testing.T) {
	requireIntegration(t)
	rs := testredis.Start(t)
	_, engines := startMock(t, 4, "--num-blocks", "512", "--speedup", "4")
	_, ing := startIngest(t, append([]string{"--store", rs.URL()}, ingestFlags(engines)...)...)
	srv := startServe(t, "--store", rs.URL())
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
	o := bench.E2EOptions{Router: srv.URL, Policies: []string{"kv", "round-robin"}, Requests: 200, Concurrency: 4,
		Groups: 16, PrefixTokens: 1024, SuffixTokens: 32, MaxTokens: 4, Seed: 1, Restart: true}
	for _, e := range engines {
		o.Workers = append(o.Workers, bench.Engine{Name: e.Name, URL: e.HTTP})
	}
	rep, err := bench.RunE2E(context.Background(), o)
	if err != nil || len(rep.Results) != 2 {
		t.Fatalf("bench e2e: %v %+v", err, rep)
	}
	out, _ := json.MarshalIndent(rep, "", "  ")
	kv, rr := rep.Results[0], rep.Results[1]
	t.Logf("%s\nkv: hit rate %.3f ttft p50 %.1f ms; round-robin: hit rate %.3f ttft p50 %.1f ms", out, kv.HitRate, kv.TTFTP50Ms, rr.HitRate, rr.TTFTP50Ms)
	if kv.Errors != 0 || rr.Errors != 0 {
		t.Fatalf("errors: kv %d (%s), round-robin %d (%s)", kv.Errors, kv.FirstErrorMsg, rr.Errors, rr.FirstErrorMsg)
	}
	if kv.HitRate <= rr.HitRate {
		t.Fatalf("KV routing hit rate %.3f does not beat round-robin's %.3f\n%s", kv.HitRate, rr.HitRate, out)
	}
}
