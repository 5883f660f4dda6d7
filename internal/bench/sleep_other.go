//go:build !linux

package bench

// newSleepClock is the open-loop generator's clock: Go's timers off Linux (see sleep_linux.go for why
// Linux sleeps on a timerfd).
func newSleepClock() clock { return wallClock{} }
