package integration

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/internal/testnet"
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
	return testnet.DoJSON(httpClient, method, url, "", body, out)
}

// waitFor polls cond every 50 ms until it returns "" or the deadline passes (testnet.WaitFor).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	testnet.WaitFor(t, timeout, 50*time.Millisecond, what, cond)
}
