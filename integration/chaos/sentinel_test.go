package chaos

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// sentinelMaster is the master set the sentinels monitor.
const sentinelMaster = "mymaster"

// sentinelConf monitors redis-a by hostname (quorum 2 of 3) and announces hostnames, so that clients
// in other containers follow the primary by name through Docker's DNS.
//
// down-after-milliseconds is 5000, not 1000: Sentinel refuses to promote a replica whose link to the
// primary has been down longer than (time since the primary was marked down) + 10 down-after periods.
// On a loaded 2-core box a sentinel stalled for 2 s enters TILT mode for 30 s, which delays marking the
// primary down by up to 30 s; with 1000 ms (10 s of slack) the replica then stays "no good" forever
// (seen in a CI run: TILT right before the kill, then -failover-abort-no-good-slave every 20 s for 3
// min). 5000 ms gives 50 s of slack, at the cost of ~4 s more outage in the measured failover.
const sentinelConf = `port 26379
bind 0.0.0.0
protected-mode no
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel monitor ` + sentinelMaster + ` redis-a 6379 2
sentinel down-after-milliseconds ` + sentinelMaster + ` 5000
sentinel failover-timeout ` + sentinelMaster + ` 10000
sentinel parallel-syncs ` + sentinelMaster + ` 1
`

// sentinel starts `redis-server /tmp/sentinel.conf --sentinel` (Sentinel rewrites its file: it must be
// writable).
func (l *lab) sentinel(name string, nets []string) *node {
	l.t.Helper()
	return l.startWith(name, redisImage(), "+monitor master", nets, []testcontainers.ContainerCustomizer{
		testcontainers.WithFiles(testcontainers.ContainerFile{
			Reader: strings.NewReader(sentinelConf), ContainerFilePath: "/tmp/sentinel.conf", FileMode: 0o666,
		}),
	}, "/tmp/sentinel.conf", "--sentinel")
}

// TestChaosSentinelFailover runs a primary, a replica and 3 Sentinels, two routers and an ingest on a
// redis-sentinel:// URL, kills the primary under steady routing load through both routers, and checks
// that routing resumes on the promoted replica without restarting anything, and that the ingest's
// events reach the new primary (the index converges to the engine's pool again).
func TestChaosSentinelFailover(t *testing.T) {
	l := newLab(t, dataNet, ctlNet)
	a := l.redis("redis-a", []string{dataNet}, "--replica-announce-ip", "redis-a")
	a.pinName()
	b := l.redis("redis-b", []string{dataNet}, "--replicaof", "redis-a", "6379", "--replica-announce-ip", "redis-b")
	b.pinName()
	waitReplicated(t, redisClient(t, a.ip(dataNet)+":6379"), redisClient(t, b.ip(dataNet)+":6379"))
	for i := 1; i <= 3; i++ {
		l.sentinel(fmt.Sprintf("sentinel%d", i), []string{dataNet})
	}
	bClient := redisClient(t, b.ip(dataNet)+":6379")
	store := "redis-sentinel://sentinel1:26379,sentinel2:26379,sentinel3:26379/" + sentinelMaster
	eng, spec := l.engine("enga", []string{dataNet, ctlNet}, "--num-blocks", "96", "--speedup", "20", "--max-num-seqs", "4")
	f := &engineFleet{l: l, eng: eng, worker: "enga1"}
	f.ing = l.ingestNode("ingest", store, []string{dataNet}, []string{spec}, "--redis-timeout", redisTimeout)
	r1 := l.router("router1", store, []string{dataNet}, "--redis-timeout", redisTimeout)
	r2 := l.router("router2", store, []string{dataNet}, "--redis-timeout", redisTimeout)
	f.router, f.engURL, f.ingURL = r1, eng.url(ctlNet, mockHTTPPort), f.ing.url(dataNet, ingestPort)
	f.routerURL = r1.url(dataNet, routerPort)
	r2URL := r2.url(dataNet, routerPort)
	f.waitSubscribed(t)
	registerWorkers(t, f.routerURL, 3)

	var g engineLoad
	g.send(f.engURL, 20)
	waitConverged(t, convergeTimeout, f.routerURL, f.engURL, f.worker, g.all())
	routers := []string{f.routerURL, r2URL}
	var turn int
	load := startRouteLoad(func() string { turn++; return routers[turn%2] }, 2, routeBody)
	defer load.halt()
	waitFor(t, time.Minute, "routing", func() string {
		if load.ok.Load() < 50 {
			return fmt.Sprintf("%d routed (%v)", load.ok.Load(), load.err())
		}
		return ""
	})
	waitReplicated(t, redisClient(t, a.ip(dataNet)+":6379"), bClient)
	a.kill()
	fault := time.Now()
	outage := load.awaitRecovery(t, "routing resumed on the promoted replica", fault, recoveredStreak, failoverTimeout)
	role, err := info(bClient, "replication")
	if err != nil || role["role"] != "master" {
		t.Fatalf("redis-b after the failover: role %q, %v", role["role"], err)
	}
	load.halt()
	// The ingest writes to the new primary too: new events converge.
	g.send(f.engURL, 10)
	waitConverged(t, convergeTimeout, f.routerURL, f.engURL, f.worker, g.all())
	st := f.stats(t)
	t.Logf("Sentinel failover: routing load 2 clients over 2 routers (route+done), %d routed, %d failed; routing resumed %v after the primary was killed; "+
		"redis-b promoted; ingest after the failover: apply errors %d (retried), lost %d; index = pool again",
		load.ok.Load(), load.failed.Load(), outage.Round(time.Millisecond), st.ApplyErrors, st.LostMessages)
	if st.LostMessages != 0 {
		t.Errorf("ingest lost %d messages", st.LostMessages)
	}
}
