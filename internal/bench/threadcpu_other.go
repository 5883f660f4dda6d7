//go:build !linux

package bench

import "time"

// threadCPU is not measured off Linux (lookup CPU figures read 0).
func threadCPU() time.Duration { return 0 }
