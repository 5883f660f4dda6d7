package server

import (
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestLargeHTTPEvent (defect 3): one 65,536-block Stored event over HTTP is applied by many bounded
// Redis calls (at least 65,536/MaxBlocksPerCall apply calls), not one that stalls every router, and the index holds
// every block. The longest call is logged from SLOWLOG (a measurement, not asserted: timings belong
// in benchmarks).
func TestLargeHTTPEvent(t *testing.T) {
	srv := testredis.Start(t, "--slowlog-log-slower-than", "10000") // log calls over 10 ms
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", io.Discard, srv.URL()
	cfg.StoreTimeout = 60 * time.Second // the whole event, all its calls
	base, stop := startServe(t, cfg)
	defer stop()
	if code, body := httpDo(t, "PUT", base+"/v1/workers/w0", `{"url":"http://w0"}`); code != 200 {
		t.Fatalf("PUT worker: %d %s", code, body)
	}
	const n = 65536
	var b strings.Builder
	b.WriteString(`{"worker_id":"w0","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"block_hash":%d,"tokens_hash":%d}`, i+1, i+1)
	}
	b.WriteString(`]}}}}`)
	calls := func() int {
		info, err := srv.Do(5*time.Second, "INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, line := range strings.Split(info, "\n") {
			for _, cmd := range []string{"cmdstat_fcall:", "cmdstat_fcall_ro:", "cmdstat_evalsha:", "cmdstat_eval:"} {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd+"calls="); ok {
					v, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
					total += v
				}
			}
		}
		return total
	}
	before := calls()
	code, body := httpDo(t, "POST", base+"/v1/events", b.String())
	if code != 200 || !strings.Contains(body, `"stored_blocks":65536`) {
		t.Fatalf("POST the event: %d %.300s", code, body)
	}
	if got := calls() - before; got < n/statestore.MaxBlocksPerCall {
		t.Fatalf("%d script calls for a %d-block event; want at least %d (bounded calls)", got, n, n/statestore.MaxBlocksPerCall)
	}
	code, body = httpDo(t, "GET", base+"/v1/workers", "")
	if code != 200 || !strings.Contains(body, `"cached_blocks":65536`) {
		t.Fatalf("GET /v1/workers after the event: %d %.400s", code, body)
	}
	slow, _ := srv.Do(5*time.Second, "SLOWLOG", "LEN")
	t.Logf("script calls %d; SLOWLOG entries over 10 ms: %s", calls()-before, slow)
	if out, err := exec.Command("redis-cli", "-p", strconv.Itoa(srv.Port()), "SLOWLOG", "GET", "5").CombinedOutput(); err == nil {
		t.Logf("SLOWLOG GET (entry, time, µs, …):\n%.120s", out)
	}
}
