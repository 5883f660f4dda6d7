package bench

import (
	"syscall"
	"time"
	"unsafe"
)

// clockThreadCPUTime is CLOCK_THREAD_CPUTIME_ID (linux/time.h).
const clockThreadCPUTime = 3

// threadCPU returns the calling OS thread's CPU time (the caller locks its goroutine to the thread). A
// lookup's CPU time next to its wall time tells work from time spent descheduled.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
