package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Helpers for tests that run `kvrouter mock` and `kvrouter ingest` as real processes.

// proc is a running kvrouter subcommand whose stderr is captured.
type proc struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
	exited chan struct{}
	err    error
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// startProc starts `kvrouter args...` and waits until every regexp in ready has matched a stderr
// line (in any order), returning each one's submatches (every match, in order of appearance).
func startProc(t *testing.T, ready []*regexp.Regexp, args ...string) (*proc, [][][]string) {
	t.Helper()
	p := &proc{name: args[0], exited: make(chan struct{})}
	p.cmd = exec.Command(kvrouterBinary(t), args...)
	p.cmd.Env = serveEnv()
	pr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line + "\n")
			p.mu.Unlock()
			select {
			case lines <- line:
			default:
			}
		}
		io.Copy(io.Discard, pr)
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	matches := make([][][]string, len(ready))
	seen := make([]bool, len(ready))
	deadline := time.After(60 * time.Second)
	for done := 0; done < len(ready); {
		select {
		case line := <-lines:
			for i, re := range ready {
				if m := re.FindStringSubmatch(line); m != nil {
					matches[i] = append(matches[i], m)
					if !seen[i] {
						seen[i] = true
						done++
					}
				}
			}
		case <-p.exited:
			t.Fatalf("kvrouter %s exited before ready: %v\n%s", p.name, p.err, p.logs())
		case <-deadline:
			t.Fatalf("kvrouter %s not ready within 60s:\n%s", p.name, p.logs())
		}
	}
	return p, matches
}

func (p *proc) stop(t *testing.T) {
	terminate(t, "kvrouter "+p.name, p.cmd, p.exited, func() error { return p.err }, p.logs)
}

// terminate sends SIGTERM to a test's child process and waits for a clean exit (killing it after 30 s);
// it reports an unclean or late exit. exitErr and logs are read after exited is closed.
func terminate(t *testing.T, name string, cmd *exec.Cmd, exited <-chan struct{}, exitErr func() error, logs func() string) {
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if err := exitErr(); err != nil {
			t.Errorf("%s exited uncleanly after SIGTERM: %v\n%s", name, err, logs())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Errorf("%s did not stop within 30s of SIGTERM", name)
	}
}

// mockEngine is one engine of a `kvrouter mock` process.
type mockEngine struct {
	Name, HTTP, Events, Replay string
}

var (
	engineReadyRE = regexp.MustCompile(`msg="engine ready" name=(\S+) http=(\S+) events=(\S+) replay=(\S*)`)
	allReadyRE    = regexp.MustCompile(`msg="all engines ready" count=(\d+)`)
	listeningRE   = regexp.MustCompile(`msg=listening addr=(\S+)`)
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
	p, m := startProc(t, []*regexp.Regexp{listeningRE}, append([]string{"ingest", "--addr", "127.0.0.1:0"}, args...)...)
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
