package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/simulation/mock"
)

// TestServeSubscribesToEngines runs `kvrouter serve --engine …` on the embedded store against a real
// `kvrouter mock` publisher: the server's own index follows the mock's block pool over ZMQ, and a
// route for a prompt the mock cached goes to that engine with the full overlap.
func TestServeSubscribesToEngines(t *testing.T) {
	requireIntegration(t)
	_, engines := startMock(t, 2, "--speedup", "20")
	args := []string{"--store", "memory"}
	args = append(args, ingestFlags(engines)...)
	srv := startServe(t, args...)

	prompt := make([]uint32, 0, 80)
	for j := 0; j < 80; j++ {
		prompt = append(prompt, uint32(7000+j))
	}
	w := engines[1]
	// The subscriber may connect after the first messages (ZMQ slow joiner): it catches up through the
	// engine's replay socket on the first live message it sees, so every attempt sends the shared prefix
	// plus one new block (a new Stored event) until the index has everything.
	attempt := 0
	waitFor(t, 90*time.Second, "serve's index holds the mock's blocks", func() string {
		attempt++
		p := append([]uint32(nil), prompt...)
		for j := 0; j < 16; j++ {
			p = append(p, uint32(900000+attempt*16+j))
		}
		if err := httpJSON("POST", w.HTTP+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 2}, nil); err != nil {
			return err.Error()
		}
		var d mock.BlocksDump
		if err := httpJSON("GET", w.HTTP+"/debug/blocks", nil, &d); err != nil {
			return err.Error()
		}
		if !d.Quiescent {
			return "mock not quiescent"
		}
		if got := workerBlocks(t, srv.URL)[w.Name]; got != int64(d.Cached) || got == 0 {
			return fmt.Sprintf("serve index holds %d blocks, mock %d", got, d.Cached)
		}
		return ""
	})
	var dec struct {
		WorkerID      string `json:"worker_id"`
		OverlapBlocks int    `json:"overlap_blocks"`
	}
	if err := httpJSON("POST", srv.URL+"/v1/route", map[string]any{"token_ids": prompt}, &dec); err != nil {
		t.Fatal(err)
	}
	if dec.WorkerID != w.Name || dec.OverlapBlocks != len(prompt)/16 {
		t.Fatalf("route went to %s with overlap %d, want %s with %d", dec.WorkerID, dec.OverlapBlocks, w.Name, len(prompt)/16)
	}
}
