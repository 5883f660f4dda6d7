package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestServeFlushesReleasesOnShutdown: a gateway request's done waits for the router's next route
// (--release-delay at its most, 1 s); when the router stops first, Run sends it before the store closes,
// so the worker's load is 0 in Redis right after Run returns — not a lease TTL later. (Without the flush
// the load would still be held unless the box stalled for the whole second before the stop: the test
// cannot fail when the flush is there.)
func TestServeFlushesReleasesOnShutdown(t *testing.T) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","object":"text_completion","model":"m","choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":8,"completion_tokens":1,"total_tokens":9}}`)
	}))
	defer engine.Close()
	srv := testredis.Start(t)
	cfg := DefaultConfig()
	cfg.Addr, cfg.LogOutput, cfg.Store, cfg.ReleaseDelay = "127.0.0.1:0", io.Discard, srv.URL(), time.Second
	cfg.SetPoolKnob("default", "block_size", 4)
	cfg.SetPoolKnob("default", "models", []string{"m"})
	base, stop := startServe(t, cfg)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	if code, body := httpDo(t, "PUT", base+"/v1/workers/w0", `{"url":"`+engine.URL+`"}`); code != 200 {
		t.Fatalf("PUT worker: %d %s", code, body)
	}
	if code, body := httpDo(t, "POST", base+"/v1/completions", `{"model":"m","prompt":[1,2,3,4,5,6,7,8],"max_tokens":1}`); code != 200 || !strings.Contains(body, `"ok"`) {
		t.Fatalf("completion: %d %s", code, body)
	}
	stop()
	stopped = true

	st, err := statestore.Open(srv.URL(), statestore.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ws, err := st.Workers(context.Background(), "default", time.Now().UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Ranks[0].ActiveRequests != 0 {
		t.Fatalf("after the router stopped: %+v; want w0 with no active request (its done sent at shutdown)", ws)
	}
}
