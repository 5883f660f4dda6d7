//go:build linux

package bench

import (
	"context"
	"testing"
	"time"
)

// TestTimerfdClockSleepsUntil: every sleep returns at or after its target (the contract runLoad's send
// lag rests on), including sleeps on a reused timerfd and after a cancelled one. No upper bound is
// asserted: how late a sleep returns is a benchmark figure (send_lag), not a test.
func TestTimerfdClockSleepsUntil(t *testing.T) {
	clk := newSleepClock()
	for i := 0; i < 20; i++ {
		target := clk.Now().Add(time.Duration(50+i*37) * time.Microsecond)
		clk.SleepUntil(context.Background(), target)
		if now := clk.Now(); now.Before(target) {
			t.Fatalf("sleep %d returned %v before its target", i, target.Sub(now))
		}
	}
	// A target in the past returns at once.
	clk.SleepUntil(context.Background(), clk.Now().Add(-time.Second))

	// Cancelled: a sleep of an hour returns when its context is cancelled …
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		clk.SleepUntil(ctx, clk.Now().Add(time.Hour))
		close(done)
	}()
	cancel()
	<-done
	// … and the clock sleeps correctly again (on another file: a cancelled one is closed).
	target := clk.Now().Add(200 * time.Microsecond)
	clk.SleepUntil(context.Background(), target)
	if now := clk.Now(); now.Before(target) {
		t.Fatalf("sleep after a cancelled one returned %v early", target.Sub(now))
	}
}

// TestTimerfdClockConcurrent: many senders sleep at once (each on its own timerfd), each until its own
// target.
func TestTimerfdClockConcurrent(t *testing.T) {
	clk := newSleepClock()
	errs := make(chan string, 64)
	start := clk.Now()
	for s := 0; s < 64; s++ {
		go func(s int) {
			target := start.Add(time.Duration(s*10) * time.Microsecond)
			clk.SleepUntil(context.Background(), target)
			if clk.Now().Before(target) {
				errs <- "early"
				return
			}
			errs <- ""
		}(s)
	}
	for s := 0; s < 64; s++ {
		if e := <-errs; e != "" {
			t.Fatal("a concurrent sleep returned before its target")
		}
	}
}
