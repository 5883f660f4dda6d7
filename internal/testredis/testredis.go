// Package testredis starts real Redis servers as child processes for tests:
// a standalone server ([Start]) or a local 3-primary Redis Cluster
// ([StartCluster]), each on free loopback ports with its own temporary
// directory, nothing persisted, and everything stopped by t.Cleanup.
//
// It runs the redis-server found on PATH (Debian's package; override the
// binaries with KVROUTER_REDIS_SERVER and KVROUTER_REDIS_CLI). When the binary
// is missing the test is skipped, unless the environment variable CI is set,
// in which case it fails: CI must exercise the Redis paths.
//
// Every server runs with --save "" --appendonly no --bind 127.0.0.1
// --enable-debug-command local (so tests may use DEBUG SLEEP and the like).
package testredis

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// startTimeout bounds how long one start attempt waits for PING.
	startTimeout = 10 * time.Second
	// startAttempts is how many fresh ports Start/StartCluster try when a
	// server fails to come up (usually: the port was taken in between).
	startAttempts = 5
	// clusterTimeout bounds waiting for cluster_state:ok on every node.
	clusterTimeout = 30 * time.Second
	// clusterBusOffset is the fixed offset of the cluster bus port.
	clusterBusOffset = 10000
	// ClusterSize is the number of primaries StartCluster creates.
	ClusterSize = 3
)

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	bin   string
	port  int
	dir   string
	extra []string
	// conf, when set, is a config file passed first and starts the process as a Sentinel
	// (redis-server CONF --sentinel …); Sentinel rewrites it, so it lives in dir.
	conf string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a standalone redis-server on a free loopback port and waits
// until it answers PING. extra arguments (e.g. "--maxmemory", "10mb") are
// appended to the command line. The server is stopped by t.Cleanup.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := requireBinary(t, "KVROUTER_REDIS_SERVER", "redis-server")
	dir := t.TempDir()
	return startOnFreePort(t, "redis-server", func(port int) *Server {
		return &Server{bin: bin, port: port, dir: dir, extra: extra}
	})
}

// startOnFreePort starts the server newServer describes on a free loopback port, trying fresh ports
// up to startAttempts times; the server is stopped by t.Cleanup.
func startOnFreePort(t testing.TB, what string, newServer func(port int) *Server) *Server {
	t.Helper()
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		port, err := freePort(false)
		if err != nil {
			t.Fatalf("testredis: %v", err)
		}
		s := newServer(port)
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("testredis: %s did not start after %d attempts: %v", what, startAttempts, lastErr)
	return nil
}

// Do sends one command on a fresh connection and returns the reply as a string (simple, bulk or
// integer replies; an error reply is an error), waiting at most d (e.g. for DEBUG SLEEP or DEBUG RELOAD).
func (s *Server) Do(d time.Duration, args ...string) (string, error) {
	return commandTimeout(s.Addr(), d, args...)
}

// Addr returns "127.0.0.1:PORT".
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns "redis://127.0.0.1:PORT".
func (s *Server) URL() string { return "redis://" + s.Addr() }

// Port returns the TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// Dir returns the server's working directory (its log is redis.log there).
func (s *Server) Dir() string { return s.dir }

// Restart kills the server (SIGKILL, no shutdown) and starts it again on the
// same port with the same arguments. Without persistence everything is gone
// afterwards: keys, loaded scripts, functions. Clients see their connections
// drop and must reconnect. A cluster node keeps its nodes.conf, so it rejoins
// its cluster with its slots (but without its keys).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	// The port is ours a moment ago; redis sets SO_REUSEADDR, so a failure
	// here means someone else grabbed it. Retry briefly, then give up.
	deadline := time.Now().Add(startTimeout)
	var err error
	for {
		if err = s.start(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testredis: restart on port %d: %v", s.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop kills the server and waits for it to exit. It is idempotent and safe
// to call from several goroutines.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Running reports whether the server process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (s *Server) args() []string {
	if s.conf != "" {
		a := []string{s.conf, "--sentinel",
			"--port", strconv.Itoa(s.port),
			"--bind", "127.0.0.1",
			"--daemonize", "no",
			"--dir", s.dir,
		}
		return append(a, s.extra...)
	}
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--enable-debug-command", "local",
	}
	return append(a, s.extra...)
}

// start launches the process and waits until it answers PING as itself.
func (s *Server) start() error {
	logPath := filepath.Join(s.dir, "redis.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "=== testredis: %s %s\n", s.bin, strings.Join(s.args(), " "))
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir = s.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	if err := waitReady(s.Addr(), cmd.Process.Pid, done, time.Now().Add(startTimeout)); err != nil {
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%w\n%s", err, tail(logPath, 15))
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// waitReady polls addr until it answers PING and INFO reports process_id ==
// pid (so a foreign server that happens to own the port never passes), the
// process exits, or the deadline passes.
func waitReady(addr string, pid int, done <-chan struct{}, deadline time.Time) error {
	delay := 5 * time.Millisecond
	var lastErr error
	for {
		select {
		case <-done:
			return errors.New("redis-server exited during startup")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s not ready after %v: %v", addr, startTimeout, lastErr)
		}
		var reply string
		reply, lastErr = command(addr, "INFO", "server")
		if lastErr == nil {
			got := infoField(reply, "process_id")
			if got == strconv.Itoa(pid) {
				return nil
			}
			lastErr = fmt.Errorf("port answered by another redis (process_id %s, want %d)", got, pid)
		}
		time.Sleep(delay)
		if delay < 100*time.Millisecond {
			delay *= 2
		}
	}
}

// Cluster is a local Redis Cluster of ClusterSize primaries and no replicas.
type Cluster struct {
	nodes []*Server
}

// StartCluster starts ClusterSize redis-server processes with
// --cluster-enabled yes on free loopback ports (each port P with P+10000,
// its cluster bus port, also free), joins them with
// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, and
// waits until every node reports cluster_state:ok and knows all nodes. extra
// arguments are appended to every node's command line (a later option wins,
// e.g. "--cluster-node-timeout", "1000" for fast failure detection; the
// default is Redis's 15 s, tolerant of a loaded machine). The nodes are
// stopped by t.Cleanup.
//
// It takes 2-6 s: Redis keeps a new primary's cluster_state at fail for its
// first 2 s, and redis-cli polls for the nodes to agree once a second.
func StartCluster(t testing.TB, extra ...string) *Cluster {
	t.Helper()
	bin := requireBinary(t, "KVROUTER_REDIS_SERVER", "redis-server")
	cli := requireBinary(t, "KVROUTER_REDIS_CLI", "redis-cli")
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		c, err := startCluster(t, bin, cli, extra)
		if err == nil {
			t.Cleanup(c.Stop)
			return c
		}
		lastErr = err
	}
	t.Fatalf("testredis: cluster did not start after %d attempts: %v", startAttempts, lastErr)
	return nil
}

func startCluster(t testing.TB, bin, cli string, extra []string) (*Cluster, error) {
	c := &Cluster{}
	used := map[int]bool{}
	for i := 0; i < ClusterSize; i++ {
		var port int
		for {
			p, err := freePort(true)
			if err != nil {
				c.Stop()
				return nil, err
			}
			if !used[p] && !used[p+clusterBusOffset] && !used[p-clusterBusOffset] {
				port = p
				break
			}
		}
		used[port], used[port+clusterBusOffset] = true, true
		args := append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
		}, extra...)
		s := &Server{bin: bin, port: port, dir: t.TempDir(), extra: args}
		if err := s.start(); err != nil {
			c.Stop()
			return nil, fmt.Errorf("node %d: %w", i, err)
		}
		c.nodes = append(c.nodes, s)
	}

	createArgs := append([]string{"--cluster", "create"}, c.Addrs()...)
	createArgs = append(createArgs, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.Command(cli, createArgs...)
	cmd.Stdin = nil
	out, err := runWithTimeout(cmd, clusterTimeout)
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.waitOK(time.Now().Add(clusterTimeout)); err != nil {
		c.Stop()
		return nil, fmt.Errorf("%w\nredis-cli output:\n%s", err, out)
	}
	return c, nil
}

// waitOK polls CLUSTER INFO on every node until all report cluster_state:ok,
// all slots assigned and every node known.
func (c *Cluster) waitOK(deadline time.Time) error {
	want := strconv.Itoa(len(c.nodes))
	var lastErr error
	for {
		ok := true
		for _, n := range c.nodes {
			info, err := command(n.Addr(), "CLUSTER", "INFO")
			if err != nil {
				ok, lastErr = false, fmt.Errorf("%s: %w", n.Addr(), err)
				break
			}
			if infoField(info, "cluster_state") != "ok" ||
				infoField(info, "cluster_slots_assigned") != "16384" ||
				infoField(info, "cluster_known_nodes") != want {
				ok, lastErr = false, fmt.Errorf("%s not ready:\n%s", n.Addr(), info)
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not ok after %v: %v", clusterTimeout, lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Addrs returns the nodes' "127.0.0.1:PORT" addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Seeds returns the comma-separated seed list "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3".
func (c *Cluster) Seeds() string { return strings.Join(c.Addrs(), ",") }

// URL returns "redis://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" (the --store form).
func (c *Cluster) URL() string { return "redis://" + c.Seeds() }

// Nodes returns the node servers (e.g. to Restart or Stop one of them).
func (c *Cluster) Nodes() []*Server { return c.nodes }

// Stop kills every node. Idempotent.
func (c *Cluster) Stop() {
	for _, n := range c.nodes {
		n.Stop()
	}
}

// requireBinary finds a binary (env override, else PATH) or skips the test —
// fails instead when CI is set.
func requireBinary(t testing.TB, env, name string) string {
	t.Helper()
	if p := os.Getenv(env); p != "" {
		return p
	}
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("testredis: %s not found on PATH (apt-get install -y redis-server redis-tools, or set %s)", name, env)
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI is set, so this is a failure")
	}
	t.Skip(msg)
	return ""
}

// freePort returns a loopback port that was free a moment ago. With
// clusterBus, port+10000 must be a valid port and free too.
func freePort(clusterBus bool) (int, error) {
	var lastErr error
	for i := 0; i < 100; i++ {
		var port int
		if clusterBus {
			// Below the usual ephemeral range (32768-60999) with the bus port
			// at +10000 still below 65536; checked by binding both.
			port = 20000 + rand.IntN(25000)
		} else {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				lastErr = err
				continue
			}
			port = l.Addr().(*net.TCPAddr).Port
			_ = l.Close()
			return port, nil
		}
		if err := probe(port); err != nil {
			lastErr = err
			continue
		}
		if err := probe(port + clusterBusOffset); err != nil {
			lastErr = err
			continue
		}
		return port, nil
	}
	return 0, fmt.Errorf("no free port: %v", lastErr)
}

func probe(port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}

// command sends one command over a fresh connection and returns the reply
// as a string (simple string, bulk string or integer). A RESP error reply
// is returned as an error. Arrays are not supported (not needed here).
func command(addr string, args ...string) (string, error) {
	return commandTimeout(addr, 2*time.Second, args...)
}

// commandTimeout is command with a bound d on the whole exchange.
func commandTimeout(addr string, d time.Duration, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(d))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk header %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}

// infoField extracts "name:value" from an INFO / CLUSTER INFO reply.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimRight(line, "\r")
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

// runWithTimeout runs cmd, killing it after d, and returns its combined output.
func runWithTimeout(cmd *exec.Cmd, d time.Duration) (string, error) {
	var out strings.Builder
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("timed out after %v", d)
	}
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "redis log (" + path + "):\n" + strings.Join(lines, "\n")
}
