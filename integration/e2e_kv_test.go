package integration

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/internal/testredis"
)

// TestE2EKVBeatsRoundRobin runs the whole system on one machine as real processes — 4 mock engines,
// `kvrouter ingest` and `kvrouter serve` sharing one Redis — and sends a prefix-heavy workload through
// route → mock → done with `kvrouter bench e2e`, then the same workload round-robin on restarted
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
	var workers []string
	for _, e := range engines {
		workers = append(workers, e.Name+"="+e.HTTP)
	}
	cmd := exec.Command(kvrouterBinary(t), "bench", "e2e", "--router", srv.URL, "--workers", strings.Join(workers, ","),
		"--requests", "200", "--concurrency", "4", "--groups", "16", "--prefix-tokens", "1024", "--suffix-tokens", "32",
		"--max-tokens", "4")
	cmd.Env = serveEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bench e2e: %v\n%s", err, out)
	}
	var rep struct {
		Results []struct {
			Policy   string  `json:"policy"`
			Errors   int     `json:"errors"`
			HitRate  float64 `json:"hit_rate"`
			TTFTP50  float64 `json:"ttft_p50_ms"`
			FirstErr string  `json:"first_error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Results) != 2 {
		t.Fatalf("bench e2e output: %v\n%s", err, out)
	}
	kv, rr := rep.Results[0], rep.Results[1]
	t.Logf("%s\nkv: hit rate %.3f ttft p50 %.1f ms; round-robin: hit rate %.3f ttft p50 %.1f ms", out, kv.HitRate, kv.TTFTP50, rr.HitRate, rr.TTFTP50)
	if kv.Errors != 0 || rr.Errors != 0 {
		t.Fatalf("errors: kv %d (%s), round-robin %d (%s)", kv.Errors, kv.FirstErr, rr.Errors, rr.FirstErr)
	}
	if kv.HitRate <= rr.HitRate {
		t.Fatalf("KV routing hit rate %.3f does not beat round-robin's %.3f\n%s", kv.HitRate, rr.HitRate, out)
	}
}
