package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ListeningRE matches the "listening" log line of `kvrouter serve` and `kvrouter ingest`; group 1 is
// the bound host:port.
var ListeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// maxLogLine bounds one captured log line, bytes.
const maxLogLine = 1 << 20

// Child is a running process whose stderr (its log) is captured.
type Child struct {
	// Name names the process in errors ("kvrouter serve").
	Name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer
	lines  chan string
	exited chan struct{}
	err    error
}

// ErrExited is returned by StartChild when the process ends before it is ready.
var ErrExited = errors.New("exited before it was ready")

// StartChild starts path with args and env (nil: this process's environment) and waits, up to timeout,
// until every regexp of ready has matched a line of its stderr (in any order). It returns, per regexp,
// every match seen until then, in order of appearance. On failure the process is killed and the error
// carries its log.
func StartChild(name, path string, args, env []string, ready []*regexp.Regexp, timeout time.Duration) (*Child, [][][]string, error) {
	c := &Child{Name: name, lines: make(chan string, 1024), exited: make(chan struct{})}
	c.cmd = exec.Command(path, args...)
	c.cmd.Env = env
	pr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := c.cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	go c.capture(pr)
	matches := make([][][]string, len(ready))
	seen := make([]bool, len(ready))
	deadline := time.After(timeout)
	for done := 0; done < len(ready); {
		select {
		case line := <-c.lines:
			for i, re := range ready {
				if m := re.FindStringSubmatch(line); m != nil {
					matches[i] = append(matches[i], m)
					if !seen[i] {
						seen[i] = true
						done++
					}
				}
			}
		case <-c.exited:
			return nil, nil, fmt.Errorf("%s %w (%v):\n%s", name, ErrExited, c.err, c.Log())
		case <-deadline:
			c.Kill()
			return nil, nil, fmt.Errorf("%s not ready within %s:\n%s", name, timeout, c.Log())
		}
	}
	return c, matches, nil
}

// capture copies stderr lines into the log and, while someone waits for ready lines, the lines channel.
func (c *Child) capture(pr io.Reader) {
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 0, 64<<10), maxLogLine)
	for sc.Scan() {
		line := sc.Text()
		c.mu.Lock()
		c.log.WriteString(line + "\n")
		c.mu.Unlock()
		select {
		case c.lines <- line:
		default: // nobody is waiting for ready lines any more
		}
	}
	_, _ = io.Copy(io.Discard, pr)
	c.err = c.cmd.Wait()
	close(c.exited)
}

// Log returns the stderr captured so far.
func (c *Child) Log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// Exited is closed when the process has ended.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// ExitErr is the process's exit error (nil: status 0); valid once Exited is closed.
func (c *Child) ExitErr() error {
	<-c.exited
	return c.err
}

// Stop sends SIGTERM and waits up to timeout for the process to end, then kills it. It returns an error
// when the process exited uncleanly or had to be killed; nil when it had already ended.
func (c *Child) Stop(timeout time.Duration) error {
	select {
	case <-c.exited:
		return nil
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		if c.err != nil {
			return fmt.Errorf("%s exited uncleanly after SIGTERM: %w\n%s", c.Name, c.err, c.Log())
		}
		return nil
	case <-time.After(timeout):
		c.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM", c.Name, timeout)
	}
}

// Kill kills the process and waits for it to end.
func (c *Child) Kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
}

// Signal sends sig to the process.
func (c *Child) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// CleanEnv is this process's environment without KVROUTER_* variables, which would configure a child
// kvrouter command.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KVROUTER_") {
			env = append(env, kv)
		}
	}
	return env
}

// StartServe runs `<bin> serve --addr 127.0.0.1:0 args...` and returns it with its base URL
// ("http://127.0.0.1:PORT", read from its listening line).
func StartServe(bin string, env []string, timeout time.Duration, args ...string) (*Child, string, error) {
	c, m, err := StartChild("kvrouter serve", bin, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), env,
		[]*regexp.Regexp{ListeningRE}, timeout)
	if err != nil {
		return nil, "", err
	}
	return c, "http://" + m[0][0][1], nil
}
