package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// stream is one streamed completion through a router's gateway.
type stream struct {
	started chan struct{} // closed at the first data chunk
	done    chan error    // the outcome: nil after "data: [DONE]"
}

// openStream posts a streamed completion (prompt promptFor(i), maxTokens tokens) to router's gateway and
// reads it to the end in the background.
func openStream(router string, i, maxTokens int) *stream {
	s := &stream{started: make(chan struct{}), done: make(chan error, 1)}
	body, _ := json.Marshal(map[string]any{"model": "mock-model", "prompt": promptFor(i), "max_tokens": maxTokens, "stream": true})
	go func() {
		client := &http.Client{} // no whole-request timeout: the stream lasts long by design
		req, err := http.NewRequest("POST", router+"/v1/completions", bytes.NewReader(body))
		if err != nil {
			s.done <- err
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+authToken)
		resp, err := client.Do(req)
		if err != nil {
			s.done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			s.done <- fmt.Errorf("status %d", resp.StatusCode)
			return
		}
		sc := bufio.NewScanner(resp.Body)
		first := true
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "data:") {
				continue
			}
			if first {
				close(s.started)
				first = false
			}
			if strings.TrimSpace(strings.TrimPrefix(line, "data:")) == "[DONE]" {
				s.done <- nil
				return
			}
		}
		s.done <- fmt.Errorf("stream ended without [DONE]: %v", sc.Err())
	}()
	return s
}

// TestChaosRouterKilledMidStream streams completions through the gateways of two routers (lease TTL
// 5 s; each stream lasts ~20 s, so the gateways renew their leases) and kills one router mid-stream:
// its streams' load must be released at lease expiry, while the other router's streams — still
// running, their leases renewed — keep their load and finish normally.
func TestChaosRouterKilledMidStream(t *testing.T) {
	const (
		leaseTTL  = 5 * time.Second
		perRouter = 3
		maxTokens = 200 // at --itl-ms 100: ~20 s per stream, 4 lease TTLs
	)
	l := newLab(t, dataNet, ctlNet)
	l.redis("redis", []string{dataNet})
	store := "redis://redis:6379"
	_, spec := l.engine("enga", []string{dataNet, ctlNet}, "--itl-ms", "100")
	l.ingestNode("ingest", store, []string{dataNet}, []string{spec})
	flags := []string{"--lease-ttl-ms", fmt.Sprint(leaseTTL.Milliseconds()), "--models", "mock-model", "--tokenize", "none"}
	r1 := l.router("router1", store, []string{dataNet}, flags...)
	r2 := l.router("router2", store, []string{dataNet}, flags...)
	r1URL, r2URL := r1.url(dataNet, routerPort), r2.url(dataNet, routerPort)
	waitFor(t, startTimeout, "worker registered by the ingest", func() string {
		var v workersView
		if err := httpJSON("GET", r2URL+"/v1/workers", nil, &v); err != nil {
			return err.Error()
		}
		if len(v.Workers) != 1 {
			return fmt.Sprintf("%d workers", len(v.Workers))
		}
		return ""
	})

	var s1, s2 []*stream
	for i := 0; i < perRouter; i++ {
		s1 = append(s1, openStream(r1URL, i, maxTokens))
		s2 = append(s2, openStream(r2URL, 100+i, maxTokens))
	}
	for _, s := range append(append([]*stream{}, s1...), s2...) {
		select {
		case <-s.started:
		case err := <-s.done:
			t.Fatalf("stream ended before its first chunk: %v", err)
		case <-time.After(startTimeout):
			t.Fatal("no first chunk")
		}
	}
	if n, err := activeRequests(r2URL); err != nil || n != 2*perRouter {
		t.Fatalf("active requests with every stream open = %d, %v; want %d", n, err, 2*perRouter)
	}
	r1.kill()
	killed := time.Now()
	waitActiveAtMost(t, leaseTTL+2*time.Minute, "the killed router's streams released", r2URL, perRouter)
	released := time.Since(killed)
	n, err := activeRequests(r2URL)
	if err != nil {
		t.Fatal(err)
	}
	// router2's streams are still running (each lasts ~20 s, several lease TTLs): their load must be
	// there, renewed.
	running := 0
	for _, s := range s2 {
		select {
		case err := <-s.done:
			s.done <- err
		default:
			running++
		}
	}
	if running == perRouter && n != perRouter {
		t.Errorf("router2's %d running streams hold %d active requests", perRouter, n)
	}
	var failed1, failed2 int
	for _, s := range s1 {
		if err := <-s.done; err != nil {
			failed1++
		}
	}
	for _, s := range s2 {
		if err := <-s.done; err != nil {
			failed2++
			t.Errorf("router2 stream: %v", err)
		}
	}
	waitActiveAtMost(t, time.Minute, "no load left", r2URL, 0)
	t.Logf("router killed mid-stream: %d streams (%d tokens at 100 ms) per router, lease TTL %v; killed router's load released %v after the kill "+
		"(active requests then: %d, router2's streams still running: %d); streams broken: killed router %d/%d, router2 %d/%d; no load left at the end",
		perRouter, maxTokens, leaseTTL, released.Round(time.Millisecond), n, running, failed1, perRouter, failed2, perRouter)
}
