package testredis

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the master set name StartSentinel monitors.
const SentinelMaster = "mymaster"

// sentinelTimeout bounds waiting for the sentinels to see the replicas and each other, and for a failover.
const sentinelTimeout = 60 * time.Second

// Sentinel is a Sentinel-managed group: one primary, its replicas and the sentinels watching them,
// all on loopback ports, stopped by t.Cleanup.
type Sentinel struct {
	Primary   *Server
	Replicas  []*Server
	Sentinels []*Server
}

// SentinelOptions tune StartSentinel.
type SentinelOptions struct {
	// Replicas of the primary, default 1.
	Replicas int
	// Sentinels watching it, default 1; the quorum is a majority of them.
	Sentinels int
	// DownAfter is Sentinel's down-after-milliseconds: how long the primary must be unreachable
	// before a failover starts. Default 2 s (short for tests, long enough for a loaded 2-core box).
	DownAfter time.Duration
}

// StartSentinel starts a primary, o.Replicas replicas (--replicaof the primary) and o.Sentinels
// `redis-server --sentinel` processes monitoring it as SentinelMaster, and waits until every
// sentinel knows every replica and every other sentinel (so a failover can be authorised at once).
func StartSentinel(t testing.TB, o SentinelOptions) *Sentinel {
	t.Helper()
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Sentinels <= 0 {
		o.Sentinels = 1
	}
	if o.DownAfter <= 0 {
		o.DownAfter = 2 * time.Second
	}
	g := &Sentinel{Primary: Start(t)}
	for i := 0; i < o.Replicas; i++ {
		g.Replicas = append(g.Replicas, Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(g.Primary.Port())))
	}
	quorum := o.Sentinels/2 + 1
	for i := 0; i < o.Sentinels; i++ {
		g.Sentinels = append(g.Sentinels, startSentinel(t, g.Primary.Port(), quorum, o.DownAfter))
	}
	deadline := time.Now().Add(sentinelTimeout)
	for _, s := range g.Sentinels {
		for {
			m := g.masterInfo(s)
			if m["status"] == "ok" && m["slaves"] == strconv.Itoa(o.Replicas) && m["sentinels"] == strconv.Itoa(o.Sentinels) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("testredis: sentinel %s sees %v, want %d replicas and %d sentinels", s.Addr(), m, o.Replicas, o.Sentinels)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return g
}

func startSentinel(t testing.TB, primaryPort, quorum int, downAfter time.Duration) *Server {
	t.Helper()
	bin := requireBinary(t, "KVROUTER_REDIS_SERVER", "redis-server")
	return startOnFreePort(t, "sentinel", func(port int) *Server {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s 10000\n"+
			"sentinel parallel-syncs %s 1\n",
			SentinelMaster, primaryPort, quorum, SentinelMaster, downAfter.Milliseconds(), SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatalf("testredis: %v", err)
		}
		return &Server{bin: bin, port: port, dir: dir, conf: conf}
	})
}

// masterInfo returns the fields of the sentinel's "master0:name=…,status=…,address=…" INFO line.
func (g *Sentinel) masterInfo(s *Server) map[string]string {
	info, err := command(s.Addr(), "INFO", "sentinel")
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	out := map[string]string{}
	for _, kv := range strings.Split(infoField(info, "master0"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// SentinelAddrs returns the sentinels' "127.0.0.1:PORT" addresses.
func (g *Sentinel) SentinelAddrs() []string {
	out := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		out[i] = s.Addr()
	}
	return out
}

// URL returns "redis-sentinel://S1,S2,…/mymaster" (the --store form).
func (g *Sentinel) URL() string {
	return "redis-sentinel://" + strings.Join(g.SentinelAddrs(), ",") + "/" + SentinelMaster
}

// MasterAddr returns the primary's address as the first sentinel reports it.
func (g *Sentinel) MasterAddr() string { return g.masterInfo(g.Sentinels[0])["address"] }

// WaitFailover waits until every sentinel reports a primary other than old (an "127.0.0.1:PORT"
// address) with status ok, and that server answers as a primary; it returns the new address.
func (g *Sentinel) WaitFailover(t testing.TB, old string) string {
	t.Helper()
	deadline := time.Now().Add(sentinelTimeout)
	for {
		addr, ok := "", true
		for _, s := range g.Sentinels {
			m := g.masterInfo(s)
			if m["address"] == old || m["address"] == "" || m["status"] != "ok" || (addr != "" && m["address"] != addr) {
				ok = false
				break
			}
			addr = m["address"]
		}
		if ok {
			if info, err := command(addr, "INFO", "replication"); err == nil && infoField(info, "role") == "master" {
				return addr
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("testredis: no failover away from %s after %v (sentinel sees %v)", old, sentinelTimeout, g.masterInfo(g.Sentinels[0]))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitReplicated blocks until every replica has acknowledged the primary's writes so far (WAIT,
// repeated in short rounds so one slow round never trips the helper's 2 s socket deadline).
func (g *Sentinel) WaitReplicated(t testing.TB) {
	t.Helper()
	n := strconv.Itoa(len(g.Replicas))
	deadline := time.Now().Add(sentinelTimeout)
	for {
		got, err := command(g.Primary.Addr(), "WAIT", n, "1000")
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testredis: WAIT %s replicas: got %q, %v", n, got, err)
		}
	}
}
