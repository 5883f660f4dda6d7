package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestTTFTCalibratesOnFirstToken: with cost_model ttft the gateway's first-token callback (prefill_done)
// calibrates the chosen rank on the measured time to first token: the engine moves the router's clock
// 250 ms before its first chunk, and the rank then shows one sample, its prefill rate fitted from the
// pool's default towards 8 tokens in 0.25 s. The engine holds the end of its stream until then: the
// gateway sends prefill_done asynchronously, and a done that overtakes it leaves nothing to calibrate.
func TestTTFTCalibratesOnFirstToken(t *testing.T) {
	var clock atomic.Int64
	clock.Store(1000)
	rt := core.New(statestore.NewMemory(), core.Options{Now: clock.Load})
	cfg := statestore.DefaultPoolConfig(4)
	cfg.Models, cfg.CostModel = []string{testModel}, statestore.CostModelTTFT
	if err := rt.PutPool(context.Background(), testPool, cfg); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(rt, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		rw.WriteHeader(200)
		clock.Add(250)
		io.WriteString(rw, "data: {\"n\":0}\n\n")
		rw.(http.Flusher).Flush()
		<-next
		io.WriteString(rw, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	released := false
	t.Cleanup(func() { // runs before srv.Close: a failed wait must not leave the handler blocked
		if !released {
			close(next)
		}
	})
	if err := rt.PutWorker(context.Background(), testPool, statestore.WorkerSpec{WorkerID: "w1", URL: srv.URL}, 0); err != nil {
		t.Fatal(err)
	}
	s := newSink()
	done := make(chan struct{})
	go func() {
		defer close(done)
		gw.Serve(context.Background(), post("/v1/completions", `{"model":"m","stream":true,"prompt":[1,2,3,4,5,6,7,8]}`), s)
	}()
	var rank statestore.RankInfo
	waitUntil(t, "the rank calibrated", func() bool {
		ws, err := rt.Workers(context.Background(), testPool)
		if err != nil || len(ws) != 1 {
			t.Fatalf("workers %+v, %v", ws, err)
		}
		rank = ws[0].Ranks[0]
		return rank.TTFT != nil
	})
	close(next)
	released = true
	<-done
	if s.status != 200 {
		t.Fatalf("status %d: %s", s.status, s.body())
	}
	ref := cfg.TTFTCalibration()
	if rank.TTFT.Samples != 1 || !(rank.TTFT.PrefillRate < ref.Ref.PrefillRate) {
		t.Fatalf("rank after one 0.25 s first token of 8 tokens: %+v (reference %+v)", *rank.TTFT, ref.Ref)
	}
}
