package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestGatewayStreamOutlivesWriteTimeout: a stream that lasts several times the server's WriteTimeout, each
// chunk well within it, reaches the client whole (fasthttp's WriteTimeout would bound the whole body; the
// adapter bounds each chunk instead), and every chunk is flushed as it comes: the engine sends the next
// chunk only after the client has read the previous one.
func TestGatewayStreamOutlivesWriteTimeout(t *testing.T) {
	const chunks = 8
	read := make(chan struct{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		for i := 0; i < chunks; i++ {
			fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-read: // the client has chunk i
			case <-r.Context().Done():
				return
			}
			time.Sleep(100 * time.Millisecond) // the engine's pace: the stream outlives the write timeout
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer engine.Close()

	st := statestore.NewMemory()
	rt := core.New(st, core.Options{})
	ctx := context.Background()
	cfg := statestore.DefaultPoolConfig(4)
	cfg.Models = []string{"m"}
	if err := rt.PutPool(ctx, "default", cfg); err != nil {
		t.Fatal(err)
	}
	if err := rt.PutWorker(ctx, "default", statestore.WorkerSpec{WorkerID: "w0", URL: engine.URL}, 0); err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(rt, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.WriteTimeout = 250 * time.Millisecond
	opts.Gateway = gw
	s, err := New(api.New(rt, api.Options{}), opts)
	if err != nil {
		t.Fatal(err)
	}
	base := serveLoopback(t, s)

	resp, err := http.Post(base+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(gateway.HeaderWorker) != "w0" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	for i := 0; i < chunks; i++ {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: {\"n\":%d}\n", i) {
			t.Fatalf("chunk %d: %q %v", i, line, err)
		}
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		read <- struct{}{}
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "data: [DONE]\n\n" {
		t.Fatalf("end of stream: %q %v", rest, err)
	}
	// The load is released once the stream ended (Finish runs right after).
	deadline := time.Now().Add(30 * time.Second)
	for {
		ws, err := rt.Workers(ctx, "default")
		if err != nil {
			t.Fatal(err)
		}
		if ws[0].Ranks[0].ActiveRequests == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("load not released")
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a timing assumption
	}
}
