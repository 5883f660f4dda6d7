//go:build linux

package bench

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// timerfdClock is the open-loop generator's clock on Linux: it sleeps on a timerfd instead of a Go
// timer. Why: when every P is idle, Go's runtime waits for its timers in epoll_wait, whose timeout is in
// whole milliseconds (runtime/netpoll_epoll.go rounds any delay under 1 ms up to 1 ms, and truncates
// longer ones to ms), so a schedule of 250 µs slots started its calls 0.3–1 ms late and the open-loop
// latencies of the embedded store (4–9 µs of service) read 0.7–1.3 ms. A timerfd is a file the netpoller
// watches like a socket: it becomes readable when its CLOCK_MONOTONIC deadline passes (hrtimer, ns
// resolution), which wakes epoll_wait then, not at the next millisecond. The goroutine blocks in the
// netpoller, not in a syscall, so it holds no P while it waits.
//
// Each sleeping sender takes a timerfd from free (made on first need, one per concurrent sleeper) and
// puts it back after a completed sleep (its expiry count read); a cancelled sleep closes its file.
type timerfdClock struct {
	free chan timerfd
}

// timerfd is one timer file: f for reads through the netpoller, fd for timerfd_settime (never f.Fd(),
// which would switch the file to blocking mode and take it out of the netpoller).
type timerfd struct {
	f  *os.File
	fd int
}

// maxTimerfds bounds the files kept for reuse (the open-loop senders, 64 by default, are the most that
// sleep at once); a sleeper beyond it closes its file.
const maxTimerfds = 256

func newSleepClock() clock { return &timerfdClock{free: make(chan timerfd, maxTimerfds)} }

func (*timerfdClock) Now() time.Time { return time.Now() }

// SleepUntil returns at or after t (CLOCK_MONOTONIC, the clock of time.Now's monotonic reading), or as
// soon as ctx is done. Without a timerfd (creation failed) it falls back to a Go timer.
func (c *timerfdClock) SleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tf, ok := c.get()
	if !ok {
		wallClock{}.SleepUntil(ctx, t)
		return
	}
	f := tf.f
	if err := unix.TimerfdSettime(tf.fd, 0, &unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}, nil); err != nil {
		f.Close()
		wallClock{}.SleepUntil(ctx, t)
		return
	}
	stop := context.AfterFunc(ctx, func() { f.SetReadDeadline(time.Unix(1, 0)) })
	var buf [8]byte
	_, err := f.Read(buf[:]) // the expiry count; an error is the deadline set by a cancelled ctx
	if !stop() || err != nil {
		// Cancelled: the deadline func may still be running, so this file is not reused (closed, not put
		// back: a late past deadline would end the next sleep early).
		f.Close()
		return
	}
	c.put(tf)
}

func (c *timerfdClock) get() (timerfd, bool) {
	select {
	case tf := <-c.free:
		return tf, true
	default:
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return timerfd{}, false
	}
	// A non-blocking fd: os.NewFile registers it with the netpoller, so Read parks the goroutine.
	return timerfd{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}, true
}

func (c *timerfdClock) put(tf timerfd) {
	select {
	case c.free <- tf:
	default:
		tf.f.Close()
	}
}
