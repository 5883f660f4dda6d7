package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want Summary
	}{
		{nil, Summary{}},
		{[]float64{5}, Summary{5, 5, 5}},
		{[]float64{3, 1, 2}, Summary{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, Summary{2.5, 1, 4}},
		{[]float64{7, 7, 1, 9, 7}, Summary{7, 1, 9}},
	} {
		in := append([]float64(nil), c.in...)
		if got := Summarize(c.in); got != c.want {
			t.Errorf("Summarize(%v) = %+v; want %+v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("Summarize reordered its input %v", c.in)
			}
		}
	}
}

// fakeClock is a clock whose time moves only when a sender sleeps until a later slot or a call
// advances it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) SleepUntil(_ context.Context, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

func (c *fakeClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// TestOpenLoopSlots: at rate R for duration D, floor(R·D) slots are scheduled, each called exactly
// once whatever the number of senders.
func TestOpenLoopSlots(t *testing.T) {
	for _, senders := range []int{1, 3, 16} {
		clk := &fakeClock{now: time.Unix(1000, 0)}
		var mu sync.Mutex
		seen := map[int]int{}
		call := func(_, slot int) (time.Time, time.Time, error) {
			mu.Lock()
			seen[slot]++
			mu.Unlock()
			now := clk.Now()
			return now, now, nil
		}
		lat, _, _, _, err := runLoad(context.Background(), clk, loadSpec{Senders: senders, Rate: 1000, Duration: 250 * time.Millisecond}, call)
		if err != nil {
			t.Fatal(err)
		}
		if len(lat) != 250 || len(seen) != 250 {
			t.Errorf("%d senders: %d latencies, %d distinct slots; want 250", senders, len(lat), len(seen))
		}
		for slot, n := range seen {
			if n != 1 || slot < 0 || slot >= 250 {
				t.Errorf("%d senders: slot %d called %d times", senders, slot, n)
			}
		}
	}
}

// TestOpenLoopNoCoordinatedOmission: one sender whose calls take twice the slot interval falls behind;
// each call's latency counts from its scheduled time, so call i waits i intervals before it starts
// and the latencies grow (i+2)·interval instead of staying at the 2-interval service time.
func TestOpenLoopNoCoordinatedOmission(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	const interval = time.Millisecond
	call := func(_, _ int) (time.Time, time.Time, error) {
		start := clk.Now()
		return start, clk.advance(2 * interval), nil
	}
	lat, el, lag, svc, err := runLoad(context.Background(), clk, loadSpec{Senders: 1, Rate: 1000, Calls: 10}, call)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range lat {
		if want := time.Duration(i+2) * interval; d != want {
			t.Errorf("call %d latency %v; want %v", i, d, want)
		}
	}
	for i, d := range lag {
		if want := time.Duration(i) * interval; d != want {
			t.Errorf("call %d send lag %v; want %v", i, d, want)
		}
	}
	for _, d := range svc {
		if d != 2*interval {
			t.Errorf("service time %v; want 2 ms", d)
		}
	}
	if el != 20*interval {
		t.Errorf("elapsed %v; want 20 ms of fake time", el)
	}
	// Closed loop: latency is the call's own time.
	lat, _, _, _, _ = runLoad(context.Background(), clk, loadSpec{Senders: 1, Calls: 3}, call)
	for _, d := range lat {
		if d != 2*interval {
			t.Errorf("closed-loop latency %v; want 2 ms", d)
		}
	}
}

// TestLoadStopsOnError: the first error stops every sender and is returned.
func TestLoadStopsOnError(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	boom := errors.New("boom")
	call := func(_, slot int) (time.Time, time.Time, error) {
		if slot == 5 {
			return time.Time{}, time.Time{}, boom
		}
		return clk.Now(), clk.advance(time.Microsecond), nil
	}
	lat, _, _, _, err := runLoad(context.Background(), clk, loadSpec{Senders: 4, Duration: time.Hour}, call)
	if !errors.Is(err, boom) || len(lat) > 1000 {
		t.Errorf("err %v after %d calls; want boom, promptly", err, len(lat))
	}
}
