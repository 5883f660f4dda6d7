package bench

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// clock is the time source of runLoad; tests inject a fake one, so the scheduler is tested without
// timing assertions.
type clock interface {
	Now() time.Time
	// SleepUntil returns at or after t, or as soon as ctx is done.
	SleepUntil(ctx context.Context, t time.Time)
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) SleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

// DefaultSpinTail is the open-loop senders' default spin tail (spinTailClock) against a store on a server:
// 50 µs, enough that the senders start on schedule (send lag p50 0–1 µs at 64 workers, 1 and 16 clients;
// 25 µs left 9–10 µs of lag) and short enough not to delay the replies: with the client on one CPU (one
// P: Go's runtime polls the network only when no goroutine is runnable, and a spinner always is) a reply
// that arrives while senders spin is read when they stop, so a 100 µs tail (sessions 16–24) added ~40 µs
// to every open-loop p50 — the service time, send to reply, fell 164 → 119 µs at 16 clients and 125 →
// 84 at 1 for the same Redis CPU per decision (docs/PERFORMANCE.md "Twenty-fifth session"). An embedded
// store gets none (RunRoute): its calls take microseconds at ~100 k/s, so spinning senders would take the
// CPU from the very store they time (p50 32 → 584 µs when tried).
const DefaultSpinTail = 50 * time.Microsecond

// DefaultSettle is the pause before an open-loop run that follows a closed-loop one (RouteOptions.Settle,
// FloorOptions.Settle): one period of the kernel's real-time bandwidth control (sched_rt_period_us, 1 s by
// default). The scripts run Redis at SCHED_FIFO (scripts/own-redis.sh); a closed loop that saturates it
// spends the period's real-time budget (sched_rt_runtime_us, 950 ms of each 1,000 by default), and an open
// loop started later in the same period inherits the throttle: Redis stopped for up to ~50 ms in the open
// run's first second (a probe on Redis's CPU saw 38 ms at +0.07 s), which alone takes a 4-s run's p99 over
// 1 ms at ~7,000 calls/s. Only runs after a saturating (multi-client) closed loop met it: a cause of the
// 16-client cells missing SPEC §9's p99 where the 1-client ones met it (docs/PERFORMANCE.md "Thirtieth
// session"). After the pause the open loop starts with a fresh budget, which its 60–85 % never exhausts.
const DefaultSettle = time.Second

// settle waits d before an open-loop run (DefaultSettle says why), or until ctx is done.
func settle(ctx context.Context, d time.Duration) { wallClock{}.SleepUntil(ctx, time.Now().Add(d)) }

// maxSpinners bounds the senders spinning at once (spinTailClock): the client CPU a run spends on
// spinning is at most this many goroutines' turns, whatever the rate; a sender that reaches its tail
// with them all taken sleeps the rest to its target as without a tail. At SPEC §9's half-load rates on Redis (≤ ~5 k calls/s) the
// average is ≤ 0.5 spinners, so the bound rarely applies.
const maxSpinners = 4

// spinTailClock sleeps on inner until tail before the target, then spins on the clock until the target,
// yielding the processor on every turn (runtime.Gosched) so the client's other goroutines (the Redis
// client's reader and writer) still run. Why: an open-loop call's latency runs from its scheduled time,
// so the time a sleeping sender takes to wake — a timer interrupt, the netpoller, the scheduler; on this
// VM a 32–57 µs median, the same for every server store — was counted into every p50 although it is the
// generator's, not the system's: a call starts when its request arrives, and an ideal generator sends
// it at its scheduled time. Spinning the last stretch starts calls within a microsecond or two of their
// schedule (docs/PERFORMANCE.md "Sixteenth session") for up to tail of client CPU per call, at most
// maxSpinners senders at once. A late sender is still charged in full (the latency still runs from the
// schedule): only the generator's own wake-up is taken out.
type spinTailClock struct {
	inner    clock
	tail     time.Duration
	spinning *atomic.Int32 // senders spinning now (shared by the run's senders)
	spun     *atomic.Int64 // ns spent spinning, all senders (client CPU the generator took; RouteRun.ClientSpinUs)
}

func (c spinTailClock) Now() time.Time { return c.inner.Now() }

func (c spinTailClock) SleepUntil(ctx context.Context, t time.Time) {
	c.inner.SleepUntil(ctx, t.Add(-c.tail))
	// A spinner's slot is taken only for the tail itself: senders waiting for later slots (most of the 64
	// at a low rate) sleep without holding one.
	if c.spinning.Add(1) > maxSpinners {
		c.spinning.Add(-1)
		c.inner.SleepUntil(ctx, t)
		return
	}
	defer c.spinning.Add(-1)
	t0 := c.inner.Now()
	now := t0
	for ctx.Err() == nil && now.Before(t) {
		runtime.Gosched()
		now = c.inner.Now()
	}
	c.spun.Add(int64(now.Sub(t0)))
}

// clientUse turns a run's client CPU (processCPU delta), its generator's spinning (spinTime) and its
// elapsed time into per-call µs and the busy share of the client's GOMAXPROCS CPUs (RouteRun.ClientCPUus,
// ClientSpinUs, ClientBusy; FloorRun's alike). Zeros for a run without calls or time.
func clientUse(cpu, spin, elapsed time.Duration, calls int) (cpuUs, spinUs, busy float64) {
	if calls > 0 {
		cpuUs, spinUs = us(cpu)/float64(calls), us(spin)/float64(calls)
	}
	if elapsed > 0 {
		busy = cpu.Seconds() / elapsed.Seconds() / float64(runtime.GOMAXPROCS(0))
	}
	return cpuUs, spinUs, busy
}

// spinTime is the time clk's senders spent spinning so far (0 for a clock without a spin tail).
func spinTime(clk clock) time.Duration {
	if c, ok := clk.(spinTailClock); ok {
		return time.Duration(c.spun.Load())
	}
	return 0
}

// openLoopClock is the open-loop generator's clock: newSleepClock's, with a spin tail when tail > 0.
func openLoopClock(tail time.Duration) clock {
	if tail <= 0 {
		return newSleepClock()
	}
	return spinTailClock{inner: newSleepClock(), tail: tail, spinning: new(atomic.Int32), spun: new(atomic.Int64)}
}

// loadSpec is one run's load shape.
type loadSpec struct {
	// Senders run calls concurrently (closed loop: the clients; open loop: the most calls in flight).
	Senders int
	// Rate is the open-loop rate, calls per second; 0 = closed loop (every sender calls back to back).
	Rate float64
	// Duration is the run's length: the schedule's length in open loop (floor(Rate·Duration) slots),
	// the time senders keep calling in closed loop.
	Duration time.Duration
	// Calls, when > 0, is the total number of calls instead (both modes).
	Calls int
	// SpinTail is the open-loop generator's spin tail; its callers build runLoad's clock from it
	// (openLoopClock(spec.SpinTail)); 0 = sleep only.
	SpinTail time.Duration
	// Observe, when set, is told each open-loop call's slot, scheduled time, start and end, from the
	// call's sender right after it (each slot once: no two senders share one).
	Observe func(slot int, sched, start, end time.Time)
}

// slotCount is the number of calls runLoad makes: Calls, or in open loop without it the schedule's
// floor(Rate·Duration) slots; 0 = until Duration (closed loop).
func (spec loadSpec) slotCount() int {
	if spec.Calls <= 0 && spec.Rate > 0 {
		return int(spec.Rate * spec.Duration.Seconds())
	}
	return spec.Calls
}

// callFunc makes call number slot on sender and returns when its measured part started and ended
// (work outside [start, end], e.g. a `done` after a decision, is not latency).
type callFunc func(sender, slot int) (start, end time.Time, err error)

// runLoad drives calls as spec says and returns (unsorted) every call's latency, the run's elapsed
// time and, in open loop, every call's send lag (its start − its scheduled time: the generator's own
// delay, timer granularity and preemption included, which the latency contains too) and service time
// (end − start, the latency without the lag). Open loop: call i is scheduled at start + i/Rate; a free sender takes the next slot, waits
// until its time and calls; the latency runs from the scheduled time, not from when the call could
// start, so a slow call charges its delay to the calls queued behind it (no coordinated omission).
// Closed loop: the latency is end − start of each call.
func runLoad(ctx context.Context, clk clock, spec loadSpec, call callFunc) (lat []time.Duration, elapsed time.Duration, lag, svc []time.Duration, err error) {
	n := spec.slotCount()
	var next atomic.Int64
	var stop atomic.Bool
	var mu sync.Mutex
	var firstErr error
	start := clk.Now()
	deadline := start.Add(spec.Duration)
	var wg sync.WaitGroup
	for s := 0; s < max(spec.Senders, 1); s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			var mine, myLag, mySvc []time.Duration
			defer func() {
				mu.Lock()
				lat, lag, svc = append(lat, mine...), append(lag, myLag...), append(svc, mySvc...)
				mu.Unlock()
			}()
			for ctx.Err() == nil && !stop.Load() {
				i := int(next.Add(1) - 1)
				if n > 0 && i >= n || n <= 0 && !clk.Now().Before(deadline) {
					return
				}
				var sched time.Time
				if spec.Rate > 0 {
					sched = start.Add(time.Duration(float64(i) * 1e9 / spec.Rate))
					clk.SleepUntil(ctx, sched)
				}
				t0, t1, err := call(s, i)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					stop.Store(true)
					return
				}
				if spec.Rate <= 0 {
					sched = t0
				} else {
					myLag, mySvc = append(myLag, t0.Sub(sched)), append(mySvc, t1.Sub(t0))
					if spec.Observe != nil {
						spec.Observe(i, sched, t0, t1)
					}
				}
				mine = append(mine, t1.Sub(sched))
			}
		}(s)
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return lat, clk.Now().Sub(start), lag, svc, firstErr
}
