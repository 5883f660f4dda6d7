package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
)

// Helpers for tests that run `kvrouter mock` and `kvrouter ingest` as real processes.

// proc is a running kvrouter subcommand whose stderr is captured.
type proc struct {
	name string
	*bench.Child
}

func (p *proc) logs() string { return p.Log() }

// startProc starts `kvrouter args...` and waits until every regexp in ready has matched a stderr
// line (in any order), returning each one's submatches (every match, in order of appearance).
func startProc(t *testing.T, ready []*regexp.Regexp, args ...string) (*proc, [][][]string) {
	t.Helper()
	c, m, err := bench.StartChild("kvrouter "+args[0], kvrouterBinary(t), args, serveEnv(), ready, childTimeout)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: args[0], Child: c}
	t.Cleanup(func() { p.stop(t) })
	return p, m
}

func (p *proc) stop(t *testing.T) {
	if err := p.Stop(childTimeout / 2); err != nil {
		t.Error(err)
	}
}

// mockEngine is one engine of a `kvrouter mock` process.
type mockEngine struct {
	Name, HTTP, Events, Replay string
}

var (
	engineReadyRE = regexp.MustCompile(`msg="engine ready" name=(\S+) http=(\S+) events=(\S+) replay=(\S*)`)
	allReadyRE    = regexp.MustCompile(`msg="all engines ready" count=(\d+)`)
)

// startMock starts `kvrouter mock --engines n` on ephemeral ports with extra flags.
func startMock(t *testing.T, n int, extra ...string) (*proc, []mockEngine) {
	t.Helper()
	args := append([]string{"mock", "--engines", fmt.Sprint(n), "--http-port", "0", "--zmq-port", "0"}, extra...)
	p, m := startProc(t, []*regexp.Regexp{engineReadyRE, allReadyRE}, args...)
	var engines []mockEngine
	for _, e := range m[0] {
		engines = append(engines, mockEngine{Name: e[1], HTTP: e[2], Events: e[3], Replay: e[4]})
	}
	if len(engines) != n {
		t.Fatalf("mock: %d engines ready, want %d", len(engines), n)
	}
	return p, engines
}

// ingestFlags are the --engine flags for a set of mock engines.
func ingestFlags(engines []mockEngine) []string {
	var out []string
	for _, e := range engines {
		out = append(out, "--engine", e.Name+"="+e.Events+",replay="+e.Replay+",url="+e.HTTP)
	}
	return out
}

// startIngest starts `kvrouter ingest` and returns its base URL.
func startIngest(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	p, m := startProc(t, []*regexp.Regexp{bench.ListeningRE}, append([]string{"ingest", "--addr", "127.0.0.1:0"}, args...)...)
	return p, "http://" + m[0][0][1]
}

// httpJSON sends a request with a JSON body (nil: none) and decodes a 2xx JSON answer into out.
func httpJSON(method, url string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: status %d: %s", method, url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// waitFor polls cond until it returns "" (true) or the deadline passes; it then fails with cond's last
// description of what is still wrong.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %s", what, timeout, msg)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not a timing assumption
	}
}
