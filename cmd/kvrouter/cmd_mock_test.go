package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testlog"
)

// TestMockPrintsEngineFlags: `kvrouter mock` prints one --engine flag per engine on stdout, one per
// line with shell continuations, and each names a live engine.
func TestMockPrintsEngineFlags(t *testing.T) {
	var out testlog.Buffer
	old := stdout
	stdout = &out
	defer func() { stdout = old }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runMock(ctx, []string{"--engines", "2", "--http-port", "0", "--zmq-port", "0", "--log-level", "error"})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(out.String(), "\n") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("mock printed %q within 60s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	re := regexp.MustCompile(`^  --engine (w[12])=tcp://127\.0\.0\.1:\d+,replay=tcp://127\.0\.0\.1:\d+,url=(http://127\.0\.0\.1:\d+)( \\)?$`)
	if len(lines) != 2 {
		t.Fatalf("printed %q, want 2 lines", lines)
	}
	for i, l := range lines {
		m := re.FindStringSubmatch(l)
		if m == nil || m[1] != []string{"w1", "w2"}[i] || (m[3] != "") != (i == 0) {
			t.Fatalf("line %d %q: want `  --engine w%d=…,url=…` continued with ` \\` except the last", i, l, i+1)
		}
		resp, err := http.Get(m[2] + "/health")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s/health: %d", m[2], resp.StatusCode)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
