package chaos

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/simulation/mock"
)

// convergeTimeout bounds how long the index may take to catch up after a fault (reconnects, replay).
const convergeTimeout = 3 * time.Minute

// engineFleet is Redis, one mock engine (small KV cache, so the load evicts), an ingest subscribed to
// it and a router, all on dataNet; the engine is also on ctlNet so the test can load it while it is cut
// off dataNet.
type engineFleet struct {
	l                                 *lab
	eng, ing, router, redisNode       *node
	engURL, ingURL, routerURL, worker string
}

func newEngineFleet(t *testing.T) *engineFleet {
	l := newLab(t, dataNet, ctlNet)
	f := &engineFleet{l: l, worker: "enga1"}
	f.redisNode = l.redis("redis", []string{dataNet})
	store := "redis://redis:6379"
	var spec string
	f.eng, spec = l.engine("enga", []string{dataNet, ctlNet}, "--num-blocks", "96", "--speedup", "20", "--max-num-seqs", "4")
	f.ing = l.ingestNode("ingest", store, []string{dataNet}, []string{spec}, "--redis-timeout", redisTimeout)
	f.router = l.router("router", store, []string{dataNet}, "--redis-timeout", redisTimeout)
	f.engURL = f.eng.url(ctlNet, mockHTTPPort)
	f.ingURL = f.ing.url(dataNet, ingestPort)
	f.routerURL = f.router.url(dataNet, routerPort)
	f.waitSubscribed(t)
	return f
}

// waitSubscribed waits until the ingest's subscriber of the worker is connected.
func (f *engineFleet) waitSubscribed(t *testing.T) {
	t.Helper()
	waitFor(t, startTimeout, f.worker+" subscriber connected", func() string {
		st, err := streamStats(t, f.ingURL)
		if err != nil {
			return err.Error()
		}
		if !st[f.worker].Connected {
			return "not connected"
		}
		return ""
	})
}

// waitCaughtUp waits until the ingest has received every message the engine published.
func (f *engineFleet) waitCaughtUp(t *testing.T) {
	t.Helper()
	waitFor(t, convergeTimeout, "ingest caught up with the engine's messages", func() string {
		st, err := streamStats(t, f.ingURL)
		if err != nil {
			return err.Error()
		}
		var d mock.BlocksDump
		if err := httpJSON("GET", f.engURL+"/debug/blocks", nil, &d); err != nil {
			return err.Error()
		}
		if s := st[f.worker]; !s.HasSeq || s.LastSeq+1 < d.Published {
			return fmt.Sprintf("ingest at seq %d, engine published %d", s.LastSeq, d.Published)
		}
		return ""
	})
}

func (f *engineFleet) stats(t *testing.T) ingest.Stats {
	t.Helper()
	st, err := streamStats(t, f.ingURL)
	if err != nil {
		t.Fatal(err)
	}
	return st[f.worker]
}

func (f *engineFleet) blocks(t *testing.T) mock.BlocksDump {
	t.Helper()
	var d mock.BlocksDump
	if err := httpJSON("GET", f.engURL+"/debug/blocks", nil, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestChaosEngineCutOff cuts a mock engine off the network its events travel on (docker network
// disconnect) while it serves completions, then reconnects it: the ingest must notice, replay the gap
// from the engine's replay socket, and the router's index must converge to the engine's real pool with
// no message lost and none applied twice.
func TestChaosEngineCutOff(t *testing.T) {
	f := newEngineFleet(t)
	var g engineLoad
	g.send(f.engURL, 30)
	waitConverged(t, convergeTimeout, f.routerURL, f.engURL, f.worker, g.all())
	before := f.stats(t)

	f.eng.disconnect(dataNet)
	// A TCP connection survives a short cut (measured: every message arrived after the reconnect, no
	// gap), and go-zeromq's PUB queues without bound. A real engine's libzmq PUB drops messages for a
	// subscriber whose queue passed its high-water mark; the engine's fault switch does that for the
	// first messages of the cut, so the ingest must find the gap and replay it.
	const cutLoad, cutDrops = 40, 10
	if err := httpJSON("POST", f.engURL+"/admin/faults", mock.Faults{DropEvents: cutDrops}, nil); err != nil {
		t.Fatal(err)
	}
	g.send(f.engURL, cutLoad) // the engine publishes while nobody can receive
	cutPublished := f.blocks(t).Published
	f.eng.connect(dataNet)
	reconnected := time.Now()
	// A real engine publishes continuously; a trickle of requests does that here, so the ingest sees
	// a live message after the gap (which is what reveals a gap).
	var trickle sync.WaitGroup
	stop := make(chan struct{})
	trickle.Add(1)
	go func() {
		defer trickle.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Second):
				g.send(f.engURL, 1)
			}
		}
	}()
	f.waitCaughtUp(t)
	close(stop)
	trickle.Wait()
	waitConverged(t, convergeTimeout, f.routerURL, f.engURL, f.worker, g.all())
	recovery := time.Since(reconnected)

	after, d := f.stats(t), f.blocks(t)
	handed := after.Messages + after.ReplayedMessages
	t.Logf("engine cut off: %d completions to the engine (%d while cut off, %d failed); engine published %d event messages (%d before reconnecting, %d dropped while cut off); "+
		"ingest: live %d, replayed %d (%d replays, %d failed), gaps %d, missed %d, lost %d, reconnects %d→%d, stale %d→%d; recovery after reconnect %v; index = pool (%d blocks)",
		g.sent.Load(), cutLoad, g.failed.Load(), d.Published, cutPublished, d.Dropped,
		after.Messages, after.ReplayedMessages, after.Replays, after.ReplayFailures, after.Gaps, after.MissedMessages, after.LostMessages,
		before.Reconnects, after.Reconnects, before.Applied.Stale, after.Applied.Stale, recovery.Round(time.Millisecond), d.Cached)
	if g.failed.Load() != 0 {
		t.Errorf("%d completions to the engine failed", g.failed.Load())
	}
	if after.LostMessages != 0 || after.Malformed != 0 {
		t.Errorf("lost %d, malformed %d messages", after.LostMessages, after.Malformed)
	}
	if handed != d.Published {
		t.Errorf("ingest handed on %d messages (live %d + replayed %d), the engine published %d: lost or applied twice",
			handed, after.Messages, after.ReplayedMessages, d.Published)
	}
	if d.Dropped != cutDrops || after.Gaps == 0 || after.ReplayedMessages < cutDrops {
		t.Errorf("the cut's %d dropped messages were not replayed: dropped %d, gaps %d, replayed %d", cutDrops, d.Dropped, after.Gaps, after.ReplayedMessages)
	}
	if after.Applied.Stale != before.Applied.Stale {
		t.Errorf("%d events arrived twice (stale)", after.Applied.Stale-before.Applied.Stale)
	}
}

// TestChaosIngestRestart kills the ingest (SIGKILL) while the engine publishes under steady load, lets
// the engine publish with nobody listening, and starts the ingest again: the new process must recover
// what it missed from the engine's replay buffer, and the index must equal the engine's pool — no event
// lost, none applied twice. A new ingest process knows no sequence: it opens a new epoch, so the store
// clears the worker's rank at its first event and the engine's whole replay buffer (10,000 messages,
// which covers this load) rebuilds it; nothing of the old epoch is applied on top of itself.
func TestChaosIngestRestart(t *testing.T) {
	f := newEngineFleet(t)
	var g engineLoad
	g.send(f.engURL, 20)
	waitConverged(t, convergeTimeout, f.routerURL, f.engURL, f.worker, g.all())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				g.send(f.engURL, 4)
			}
		}
	}()
	sentAtLeast := func(n int64) func() string {
		return func() string {
			if s := g.sent.Load(); s < n {
				return fmt.Sprintf("%d completions sent", s)
			}
			return ""
		}
	}
	waitFor(t, time.Minute, "load running", sentAtLeast(40))
	pubAtKill := f.blocks(t).Published
	f.ing.kill()
	waitFor(t, time.Minute, "load while the ingest is down", sentAtLeast(g.sent.Load()+30))
	f.ing.restart()
	restarted := time.Now()
	f.ingURL = f.ing.url(dataNet, ingestPort) // a restarted container may get a new address
	waitReady(t, f.ingURL)
	f.waitSubscribed(t)
	waitFor(t, time.Minute, "load after the restart", sentAtLeast(g.sent.Load()+20))
	close(stop)
	wg.Wait()
	f.waitCaughtUp(t)
	waitConverged(t, convergeTimeout, f.routerURL, f.engURL, f.worker, g.all())
	recovery := time.Since(restarted)

	after, d := f.stats(t), f.blocks(t)
	t.Logf("ingest restarted: %d completions to the engine (%d failed), engine published %d event messages (%d when the ingest was killed); "+
		"new ingest: live %d, replayed %d (%d replays, %d failed), gaps %d, missed %d, lost %d, partial-history epochs %d, restarts %d, "+
		"events applied %d, stale %d, rank cleared by the new epoch %d; converged %v after the restart; index = pool (%d blocks)",
		g.sent.Load(), g.failed.Load(), d.Published, pubAtKill,
		after.Messages, after.ReplayedMessages, after.Replays, after.ReplayFailures, after.Gaps, after.MissedMessages, after.LostMessages,
		after.PartialHistory, after.Restarts, after.Applied.Applied, after.Applied.Stale, after.Applied.Restarts, recovery.Round(time.Millisecond), d.Cached)
	if g.failed.Load() != 0 {
		t.Errorf("%d completions to the engine failed", g.failed.Load())
	}
	if after.LostMessages != 0 || after.Malformed != 0 || after.PartialHistory != 0 {
		t.Errorf("lost %d, malformed %d messages; partial history %d", after.LostMessages, after.Malformed, after.PartialHistory)
	}
	if handed := after.Messages + after.ReplayedMessages; handed != d.Published || after.Applied.Restarts != 1 {
		t.Errorf("new ingest handed on %d messages (live %d + replayed %d) into %d cleared epochs; the engine published %d: want all, into one",
			handed, after.Messages, after.ReplayedMessages, after.Applied.Restarts, d.Published)
	}
}
