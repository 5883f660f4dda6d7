package bench

import (
	"os"
	"slices"
	"strconv"
	"strings"
)

// Summary is the median, min and max of one headline figure over repeated runs (SPEC §9: every
// headline figure is the median of ≥ 3 runs with min and max).
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize is the Summary of xs (the mean of the two middle values for an even count); zero when empty.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{Median: med, Min: s[0], Max: s[n-1]}
}

// LoadAvg is /proc/loadavg's 1-, 5- and 15-minute load averages (zeros where it cannot be read: the
// box is shared, so every report says what it ran under).
type LoadAvg [3]float64

// ReadLoadAvg reads /proc/loadavg.
func ReadLoadAvg() LoadAvg {
	var l LoadAvg
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l
	}
	for i, f := range strings.Fields(string(b)) {
		if i == 3 {
			break
		}
		l[i], _ = strconv.ParseFloat(f, 64)
	}
	return l
}
