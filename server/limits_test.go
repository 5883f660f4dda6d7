package server

import (
	"io"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/testredis"
)

// TestLimits (defects 2 and 8, SPEC §7.3): --max-pools and --max-workers answer 409 with a message
// naming the flag, on both stores; updating an existing pool or worker is not creating one; an id over
// 256 bytes is a 400.
func TestLimits(t *testing.T) {
	srv := testredis.Start(t)
	for _, store := range []string{"memory", srv.URL()} {
		t.Run(strings.SplitN(store, ":", 2)[0], func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Addr, cfg.LogOutput, cfg.Store = "127.0.0.1:0", io.Discard, store
			cfg.MaxPools, cfg.MaxWorkers = 2, 2 // the implicit default pool is one of the two
			base, stop := startServe(t, cfg)
			defer stop()
			long := strings.Repeat("x", 257)
			for _, c := range []struct {
				method, path, body string
				want               int
				contains           string
			}{
				{"PUT", "/v1/pools/a", `{"block_size":16}`, 200, ""},
				{"PUT", "/v1/pools/b", `{"block_size":16}`, 409, "--max-pools"},
				{"PUT", "/v1/pools/a", `{"temperature":0.5}`, 200, ""},
				{"PUT", "/v1/workers/w0?pool=a", `{"url":"http://w0"}`, 200, ""},
				{"PUT", "/v1/workers/w1?pool=a", `{"url":"http://w1"}`, 200, ""},
				{"PUT", "/v1/workers/w2?pool=a", `{"url":"http://w2"}`, 409, "--max-workers"},
				{"PUT", "/v1/workers/w1?pool=a", `{"url":"http://w1b"}`, 200, ""},
				{"PUT", "/v1/pools/" + long, `{"block_size":16}`, 400, "256"},
				{"PUT", "/v1/workers/" + long, `{"url":"http://x"}`, 400, "256"},
			} {
				if code, body := httpDo(t, c.method, base+c.path, c.body); code != c.want || !strings.Contains(body, c.contains) {
					t.Errorf("%s %.60s: %d %s; want %d containing %q", c.method, c.path, code, body, c.want, c.contains)
				}
			}
		})
	}
}
