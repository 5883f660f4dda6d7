package bench

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stepClock is a fake clock whose every reading advances it by step (so a spin on it ends) and whose
// sleeps record their target and jump to it.
type stepClock struct {
	mu      sync.Mutex
	now     time.Time
	step    time.Duration
	reads   int
	targets []time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	c.reads++
	return c.now
}

func (c *stepClock) SleepUntil(_ context.Context, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.targets = append(c.targets, t)
	if t.After(c.now) {
		c.now = t
	}
}

// TestSpinTailClock: the sender sleeps until tail before the target, then spins on the clock until the
// target (never returning early); a target nearer than tail is spun for from the start; a cancelled
// context ends the spin even on a clock that does not move.
func TestSpinTailClock(t *testing.T) {
	inner := &stepClock{now: time.Unix(1000, 0), step: time.Microsecond}
	clk := spinTailClock{inner: inner, tail: 100 * time.Microsecond, spinning: new(atomic.Int32), spun: new(atomic.Int64)}
	target := time.Unix(1000, 0).Add(time.Second)
	clk.SleepUntil(context.Background(), target)
	if len(inner.targets) != 1 || !inner.targets[0].Equal(target.Add(-100*time.Microsecond)) {
		t.Fatalf("inner sleeps %v, want one until %v", inner.targets, target.Add(-100*time.Microsecond))
	}
	if now := inner.now; now.Before(target) {
		t.Fatalf("returned %v before the target", target.Sub(now))
	}
	if inner.reads < 100 {
		t.Fatalf("%d clock readings: the last 100 µs were not spun", inner.reads)
	}
	if spun := spinTime(clk); spun < 98*time.Microsecond || spun > 102*time.Microsecond {
		t.Fatalf("spin time %v, want the 100-µs tail (the clock's 1-µs steps)", spun)
	}

	// A target 30 µs ahead: the inner sleep's target is already past, the spin does the rest.
	near := inner.now.Add(30 * time.Microsecond)
	clk.SleepUntil(context.Background(), near)
	if inner.now.Before(near) {
		t.Fatalf("near target: returned early")
	}

	frozen := &stepClock{now: time.Unix(1000, 0)}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	spinTailClock{inner: frozen, tail: time.Hour, spinning: new(atomic.Int32), spun: new(atomic.Int64)}.SleepUntil(ctx, frozen.now.Add(time.Minute)) // returns: ctx done
	if n := clk.spinning.Load(); n != 0 {
		t.Fatalf("%d spinners left after the sleeps returned", n)
	}
}

// TestSpinTailClockBound: with maxSpinners senders already spinning, another sleeps to its tail and then
// on to its target without spinning (a second inner sleep, no clock readings) and leaves the count as it
// found it.
func TestSpinTailClockBound(t *testing.T) {
	inner := &stepClock{now: time.Unix(1000, 0), step: time.Microsecond}
	clk := spinTailClock{inner: inner, tail: 100 * time.Microsecond, spinning: new(atomic.Int32), spun: new(atomic.Int64)}
	clk.spinning.Store(maxSpinners)
	target := time.Unix(1001, 0)
	clk.SleepUntil(context.Background(), target)
	if len(inner.targets) != 2 || !inner.targets[0].Equal(target.Add(-100*time.Microsecond)) || !inner.targets[1].Equal(target) ||
		inner.reads != 0 {
		t.Fatalf("inner sleeps %v, %d clock readings; want sleeps until the tail and %v, and no spin", inner.targets, inner.reads, target)
	}
	if n := clk.spinning.Load(); n != maxSpinners {
		t.Fatalf("spinners %d after a bounded sleep, want %d", n, maxSpinners)
	}
	if spun := spinTime(clk); spun != 0 {
		t.Fatalf("spin time %v after a sleep that did not spin", spun)
	}
}

// TestOpenLoopClock: tail 0 is the plain sleeping clock, a positive tail wraps it.
func TestOpenLoopClock(t *testing.T) {
	if _, ok := openLoopClock(0).(spinTailClock); ok {
		t.Fatal("tail 0: want the sleeping clock, got a spin tail")
	}
	if spun := spinTime(openLoopClock(0)); spun != 0 {
		t.Fatalf("sleeping clock: spin time %v", spun)
	}
	c, ok := openLoopClock(DefaultSpinTail).(spinTailClock)
	if !ok || c.tail != DefaultSpinTail {
		t.Fatalf("tail %v: got %#v", DefaultSpinTail, openLoopClock(DefaultSpinTail))
	}
	// The real clock: every sleep returns at or after its target (no upper bound: that is send_lag).
	for i := 0; i < 10; i++ {
		target := c.Now().Add(time.Duration(20+i*60) * time.Microsecond)
		c.SleepUntil(context.Background(), target)
		if now := c.Now(); now.Before(target) {
			t.Fatalf("sleep %d returned %v early", i, target.Sub(now))
		}
	}
}

// TestClientUse: per-call µs of the client's CPU and spinning, and its busy share of GOMAXPROCS CPUs;
// zeros where a run made no call or took no time.
func TestClientUse(t *testing.T) {
	procs := float64(runtime.GOMAXPROCS(0))
	cpu, spin, busy := clientUse(2*time.Millisecond, time.Millisecond, 10*time.Millisecond, 4)
	if cpu != 500 || spin != 250 || math.Abs(busy-0.2/procs) > 1e-12 {
		t.Fatalf("clientUse(2 ms, 1 ms, 10 ms, 4) = %v, %v, %v; want 500, 250, %v", cpu, spin, busy, 0.2/procs)
	}
	if cpu, spin, busy := clientUse(time.Millisecond, 0, 0, 0); cpu != 0 || spin != 0 || busy != 0 {
		t.Fatalf("no calls, no time: %v, %v, %v; want zeros", cpu, spin, busy)
	}
}
