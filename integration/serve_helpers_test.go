package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
)

// Helpers for the `kvrouter serve` end-to-end tests: build the real binary once, start it on a free
// loopback port (port 0; the bound address is read from its "listening" log line), wait for /readyz.

var (
	serveBinOnce sync.Once
	serveBin     string
	serveBinErr  error
)

// kvrouterBinary builds ./cmd/kvrouter once per test binary.
func kvrouterBinary(t *testing.T) string {
	t.Helper()
	serveBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "kvrouter-serve-test-")
		if err != nil {
			serveBinErr = err
			return
		}
		serveBin = filepath.Join(dir, "kvrouter")
		cmd := exec.Command("go", "build", "-o", serveBin, "./cmd/kvrouter")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			serveBinErr = fmt.Errorf("go build ./cmd/kvrouter: %v\n%s", err, out)
		}
	})
	if serveBinErr != nil {
		t.Fatal(serveBinErr)
	}
	return serveBin
}

// serveProc is one running `kvrouter serve`.
type serveProc struct {
	URL string
	*bench.Child
}

// childTimeout bounds a child's start (ready lines, /readyz) and its stop after SIGTERM; generous for a
// loaded 2-core machine.
const childTimeout = 60 * time.Second

// startServe starts `kvrouter serve --addr 127.0.0.1:0 args...` and waits until /readyz answers 200.
// The process gets SIGTERM (then SIGKILL) at cleanup.
func startServe(t *testing.T, args ...string) *serveProc {
	t.Helper()
	p, err := startServeErr(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func startServeErr(t *testing.T, args ...string) (*serveProc, error) {
	t.Helper()
	c, url, err := bench.StartServe(kvrouterBinary(t), serveEnv(), childTimeout, args...)
	if err != nil {
		return nil, err
	}
	p := &serveProc{URL: url, Child: c}
	t.Cleanup(func() { p.stop(t) })
	deadline := time.Now().Add(childTimeout)
	for {
		st, _, err := p.do("GET", "/readyz", "")
		if err == nil && st == 200 {
			return p, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("/readyz not 200 within %s (last %d %v):\n%s", childTimeout, st, err, p.log())
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not a timing assumption
	}
}

// serveEnv is the environment without KVROUTER_* variables (they would configure the server).
func serveEnv() []string { return bench.CleanEnv() }

func (p *serveProc) log() string { return p.Log() }

// stop sends SIGTERM and waits for a clean exit; it reports an unclean one.
func (p *serveProc) stop(t *testing.T) {
	if err := p.Stop(childTimeout / 2); err != nil {
		t.Error(err)
	}
}

// httpClient waits for "100 Continue" before sending a body when the request asks for it, so a server
// that refuses a huge body answers 413 instead of closing under the client's write.
var httpClient = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{ExpectContinueTimeout: 30 * time.Second}}

// do sends one request and returns status and body.
func (p *serveProc) do(method, path, body string, hdr ...string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(context.Background(), method, p.URL+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// must sends a request and fails the test unless the status is want.
func (p *serveProc) must(t *testing.T, want int, method, path, body string, hdr ...string) []byte {
	t.Helper()
	st, b, err := p.do(method, path, body, hdr...)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	if st != want {
		t.Fatalf("%s %s %.200s: status %d, want %d: %s", method, path, body, st, want, b)
	}
	return b
}

// decision is the comparable part of a route answer (the replay's printed shape).
type decision struct {
	RequestID      string  `json:"request_id"`
	WorkerID       string  `json:"worker_id"`
	DPRank         int     `json:"dp_rank"`
	OverlapBlocks  int     `json:"overlap_blocks"`
	RequiredBlocks int64   `json:"required_blocks"`
	Cost           float64 `json:"cost"`
}

func decodeDecision(t *testing.T, b []byte) decision {
	t.Helper()
	var d decision
	if err := json.Unmarshal(b, &d); err != nil || d.WorkerID == "" {
		t.Fatalf("not a decision: %s", b)
	}
	return d
}
