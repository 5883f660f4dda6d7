package bench

import (
	"slices"
	"time"
)

// quantileUs is the q-quantile of sorted durations (index floor(q·(n−1))), in µs; 0 when empty.
func quantileUs(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return us(sorted[int(q*float64(len(sorted)-1))])
}

// us is d in µs.
func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// nearestRank is the q-quantile of sorted values by nearest rank, 0 when empty.
func nearestRank(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sortDurations sorts in place and returns d.
func sortDurations(d []time.Duration) []time.Duration {
	slices.Sort(d)
	return d
}
