// Package chaos is the full-system chaos suite: kvrouter serve, ingest and mock engines and Redis
// (standalone, Sentinel, Cluster) in Docker containers on private networks, killed, restarted and cut
// off while they carry load. It lives in its own package because testcontainers adds ~155 packages to
// a test build.
//
// Images are built locally (no registry): infra/redis-image/build.sh (Redis from the host's
// redis-server) and infra/kvrouter-image/build.sh (the static kvrouter binary FROM scratch, rebuilt
// once per test binary from the checked-out source).
//
//	make test        # builds the Redis image, sets the variables below
//	TESTCONTAINERS_RYUK_DISABLED=true KVROUTER_REDIS_IMAGE=kvrouter/redis-local:7 \
//	    go test -count=1 -v ./integration/chaos/
//
// The test process reaches containers at their IP addresses on the private networks (the Docker
// daemon runs in this network namespace); containers reach each other by network alias. Every test
// skips in -short mode and where no Docker engine runs — except under CI, where it fails instead.
// CHAOS_LOGS=1 prints every container's log at the end of its test (failed tests always do).
// Each scenario logs its numbers (load offered, requests failed, recovery time, events lost and
// duplicated) with t.Logf; docs/RELIABILITY.md "Chaos scenarios" records them.
package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/kvrouter/kvrouter/internal/testnet"
)

// kvrouterImage is the tag infra/kvrouter-image/build.sh builds for this suite.
const kvrouterImage = "kvrouter/kvrouter-local:chaos"

// startTimeout bounds creating and starting one container (and building the image once); generous for
// a loaded 2-core machine.
const startTimeout = 3 * time.Minute

func inCI() bool { return os.Getenv("CI") != "" }

func redisImage() string {
	if img := os.Getenv("KVROUTER_REDIS_IMAGE"); img != "" {
		return img
	}
	return "kvrouter/redis-local:7"
}

// requireDocker skips in -short mode and where no Docker engine is usable; under CI it fails instead.
func requireDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("chaos suite: skipped in -short mode")
	}
	if !inCI() {
		testcontainers.SkipIfProviderIsNotHealthy(t)
	}
	if !testcontainers.ReadConfig().RyukDisabled {
		t.Fatal("set TESTCONTAINERS_RYUK_DISABLED=true (make test does): the Ryuk image cannot be pulled here")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		t.Fatalf("docker CLI not usable (the suite runs docker kill/network disconnect): %v", err)
	}
	buildImagesOnce.Do(buildImages)
	if buildErr != nil {
		t.Fatal(buildErr)
	}
}

var (
	buildImagesOnce sync.Once
	buildErr        error
)

// buildImages builds the kvrouter image from this checkout, and the Redis image if it is missing.
func buildImages() {
	for _, c := range [][]string{
		{"bash", "../../infra/kvrouter-image/build.sh", kvrouterImage},
		{"bash", "../../infra/redis-image/build.sh", redisImage()},
	} {
		if c[1] == "../../infra/redis-image/build.sh" && exec.Command("docker", "image", "inspect", c[2]).Run() == nil {
			continue
		}
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("%s: %v\n%s", strings.Join(c, " "), err, out)
			return
		}
	}
}

// Network names of a lab. dataNet carries all traffic between containers; ctlNet is the test's own
// way into a node that must stay reachable while it is cut off dataNet (no alias there).
const (
	dataNet = "data"
	ctlNet  = "ctl"
)

// lab is one scenario's set of private networks and containers, removed when the test ends.
type lab struct {
	t    *testing.T
	nets map[string]*testcontainers.DockerNetwork
	// pinned: "name:ip" of nodes whose names every later container resolves through /etc/hosts (see
	// pinName).
	pinned []string
}

func newLab(t *testing.T, nets ...string) *lab {
	t.Helper()
	requireDocker(t)
	l := &lab{t: t, nets: map[string]*testcontainers.DockerNetwork{}}
	for _, n := range nets {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		nw, err := network.New(ctx)
		cancel()
		testcontainers.CleanupNetwork(t, nw)
		if err != nil {
			t.Fatalf("network %s: %v", n, err)
		}
		l.nets[n] = nw
	}
	return l
}

// node is one container of a lab.
type node struct {
	l    *lab
	name string // the alias on every network it joins
	c    *testcontainers.DockerContainer
}

// start runs image with args (after the entrypoint) on the named networks, reachable there as name,
// and waits until its log shows readyLog.
func (l *lab) start(name, image, readyLog string, nets []string, args ...string) *node {
	l.t.Helper()
	return l.startWith(name, image, readyLog, nets, nil, args...)
}

// startWith is start with more container options (files, …).
func (l *lab) startWith(name, image, readyLog string, nets []string, more []testcontainers.ContainerCustomizer, args ...string) *node {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	opts := []testcontainers.ContainerCustomizer{
		testcontainers.WithCmd(args...),
		testcontainers.WithWaitStrategyAndDeadline(startTimeout, wait.ForLog(readyLog)),
	}
	for _, n := range nets {
		aliases := []string{name}
		if n == ctlNet {
			aliases = nil // the test's back door: no other container finds the node there
		}
		opts = append(opts, network.WithNetwork(aliases, l.nets[n]))
	}
	if len(l.pinned) > 0 {
		hosts := slices.Clone(l.pinned)
		opts = append(opts, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.ExtraHosts = append(hc.ExtraHosts, hosts...)
		}), testcontainers.WithFiles(testcontainers.ContainerFile{
			// glibc without an nsswitch.conf (our FROM-scratch Redis image) asks DNS before
			// /etc/hosts: the pinned names must come from the file.
			Reader: strings.NewReader("hosts: files dns\n"), ContainerFilePath: "/etc/nsswitch.conf", FileMode: 0o444,
		}))
	}
	opts = append(opts, more...)
	c, err := testcontainers.Run(ctx, image, opts...)
	testcontainers.CleanupContainer(l.t, c)
	if err != nil {
		l.t.Fatalf("start %s (%s %v): %v", name, image, args, err)
	}
	n := &node{l: l, name: name, c: c}
	l.t.Cleanup(func() { // runs before the container's removal
		if l.t.Failed() || os.Getenv("CHAOS_LOGS") != "" {
			l.t.Logf("--- logs of %s (last 8000 bytes):\n%s", name, n.logs())
		}
	})
	return n
}

// authToken is the admin bearer token of every serve and ingest container (SPEC §7.3: a non-loopback
// --addr needs --auth-tokens); httpJSON and the gateway streams send it.
const authToken = "chaos-suite-admin-token-0123456789"

// kvrouter starts a kvrouter container (`kvrouter args...`) that is ready once it logs readyLog. serve
// and ingest get a tokens file (/tmp/tokens: "admin authToken") and --auth-tokens.
func (l *lab) kvrouter(name, readyLog string, nets []string, args ...string) *node {
	var more []testcontainers.ContainerCustomizer
	if args[0] == "serve" || args[0] == "ingest" {
		args = append(args, "--auth-tokens", "/tmp/tokens")
		more = append(more, testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader("admin " + authToken + "\n"), ContainerFilePath: "/tmp/tokens", FileMode: 0o444,
		}))
	}
	return l.startWith(name, kvrouterImage, readyLog, nets, more, args...)
}

// ip is the node's address on network n, as the test process reaches it.
func (n *node) ip(net string) string {
	n.l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := n.c.Inspect(ctx)
	if err != nil {
		n.l.t.Fatalf("inspect %s: %v", n.name, err)
	}
	ep, ok := in.NetworkSettings.Networks[n.l.nets[net].Name]
	if !ok || !ep.IPAddress.IsValid() {
		n.l.t.Fatalf("%s is not on network %s", n.name, net)
	}
	return ep.IPAddress.String()
}

// pinName makes the node's name resolve through /etc/hosts in every container started after it, so
// that it keeps resolving once the node is killed — as a dead host's DNS record does. Docker's DNS
// forgets a stopped container's name at once and then forwards the lookup upstream, which times out
// in a sandbox without a resolver: Sentinel resolves hostnames synchronously, and such lookups stalled
// the sentinels long enough (seconds each) to enter TILT mode and never fail over (measured: TILT for
// 30 s, then "-failover-abort-no-good-slave" forever, the replica's link having been down longer than
// 10 down-after periods). Later containers also get an /etc/nsswitch.conf that puts files first. Only
// for nodes that are not restarted: a restarted container may get another address.
func (n *node) pinName() { n.l.pinned = append(n.l.pinned, n.name+":"+n.ip(dataNet)) }

// url is http://ip:port of the node on network net.
func (n *node) url(net string, port int) string { return fmt.Sprintf("http://%s:%d", n.ip(net), port) }

// docker runs the docker CLI (kill, network disconnect/connect, …) and fails the test on error.
func (l *lab) docker(args ...string) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// kill sends SIGKILL: the process gets no chance to clean up.
func (n *node) kill() { n.l.docker("kill", "--signal", "KILL", n.c.GetContainerID()) }

// restart starts a stopped or killed container again (same networks, aliases and command).
func (n *node) restart() { n.l.docker("start", n.c.GetContainerID()) }

// disconnect cuts the node off network net; connect joins it again under its alias.
func (n *node) disconnect(net string) {
	n.l.docker("network", "disconnect", n.l.nets[net].Name, n.c.GetContainerID())
}
func (n *node) connect(net string) {
	n.l.docker("network", "connect", "--alias", n.name, n.l.nets[net].Name, n.c.GetContainerID())
}

// logs returns the container's output so far (for failure messages).
func (n *node) logs() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, err := n.c.Logs(ctx)
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	if len(b) > 8000 {
		b = b[len(b)-8000:]
	}
	return string(b)
}

var httpClient = &http.Client{Timeout: 20 * time.Second}

// httpJSON sends a request with a JSON body (nil: none) and the suite's admin token, and decodes a 2xx
// JSON answer into out.
func httpJSON(method, url string, body, out any) error {
	return testnet.DoJSON(httpClient, method, url, authToken, body, out)
}

// waitFor polls cond every 100 ms until it returns "" or the deadline passes (testnet.WaitFor).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() string) {
	t.Helper()
	testnet.WaitFor(t, timeout, 100*time.Millisecond, what, cond)
}

// waitReady waits until GET base/readyz answers 200.
func waitReady(t *testing.T, base string) {
	t.Helper()
	waitFor(t, startTimeout, base+"/readyz", func() string {
		if err := httpJSON("GET", base+"/readyz", nil, nil); err != nil {
			return err.Error()
		}
		return ""
	})
}
