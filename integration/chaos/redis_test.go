package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// failoverTimeout bounds a Redis outage's end (restart, Sentinel or Cluster failover) as the routers
// see it; generous for a loaded 2-core machine.
const failoverTimeout = 3 * time.Minute

// recoveredStreak is how many requests in a row must succeed after the last failure for routing to
// count as resumed.
const recoveredStreak = 200

// redisTimeout is the routers' --redis-timeout in these scenarios: a dead primary is noticed within it.
const redisTimeout = "2s"

// redisClient is a direct client of one Redis node (by IP, from the test process), closed at cleanup.
func redisClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	t.Cleanup(c.Close)
	return c
}

// info returns one INFO section of a node as key → value.
func info(c rueidis.Client, section string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := c.Do(ctx, c.B().Info().Section(section).Build()).ToString()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// waitReplicated waits until replica's replication link is up and its offset has reached primary's.
func waitReplicated(t *testing.T, primary, replica rueidis.Client) {
	t.Helper()
	waitFor(t, failoverTimeout, "replica caught up", func() string {
		p, err := info(primary, "replication")
		if err != nil {
			return err.Error()
		}
		r, err := info(replica, "replication")
		if err != nil {
			return err.Error()
		}
		if r["master_link_status"] != "up" || r["slave_repl_offset"] != p["master_repl_offset"] {
			return fmt.Sprintf("link %s, offset %s of %s", r["master_link_status"], r["slave_repl_offset"], p["master_repl_offset"])
		}
		return ""
	})
}

// TestChaosRedisRestartEmpty kills Redis (no persistence) under steady routing load and starts it
// again, empty: the router must re-declare its pool and the ingest re-register its engine's worker
// (defect 1 of issue 11) so that routing resumes without restarting either of them.
func TestChaosRedisRestartEmpty(t *testing.T) {
	f := newEngineFleet(t)
	redis := f.redisNode
	load := startRouteLoad(func() string { return f.routerURL }, 2, routeBody)
	defer load.halt()
	waitFor(t, time.Minute, "routing", func() string {
		if load.ok.Load() < 50 {
			return fmt.Sprintf("%d routed (%v)", load.ok.Load(), load.err())
		}
		return ""
	})
	redis.kill()
	fault := time.Now()
	var notReady bool
	waitFor(t, time.Minute, "router /readyz not ready while Redis is down", func() string {
		if err := httpJSON("GET", f.routerURL+"/readyz", nil, nil); err == nil {
			return "ready"
		}
		notReady = true
		return ""
	})
	redis.restart()
	outage := load.awaitRecovery(t, "routing resumed on the empty Redis", fault, recoveredStreak, failoverTimeout)
	waitReady(t, f.routerURL)
	load.halt()
	t.Logf("Redis restarted empty: router load 2 clients (route+done), %d routed, %d failed; routing resumed %v after the kill (restart included); "+
		"/readyz answered not ready during the outage: %v",
		load.ok.Load(), load.failed.Load(), outage.Round(time.Millisecond), notReady)
}
