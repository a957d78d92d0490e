// Package benchmark measures delay mechanisms side by side: the same
// open-loop order workload on each, with close lateness, throughput, loss,
// duplicates, the stock invariant, CPU and memory. `hourglass bench` drives
// it; the bench/ module adds peer systems (asynq, River) to the same run.
package benchmark

import (
	"math"
	"slices"
	"time"
)

// Summary describes a distribution of durations.
type Summary struct {
	N     int     `json:"n"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	Early int     `json:"early"` // values below zero (fired before the deadline)
}

// Summarize returns the nearest-rank percentiles of ds in milliseconds. It
// does not modify ds. An empty input gives a zero Summary.
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	ms := make([]float64, len(ds))
	s := Summary{N: len(ds)}
	for i, d := range ds {
		ms[i] = float64(d) / float64(time.Millisecond)
		if d < 0 {
			s.Early++
		}
	}
	slices.Sort(ms)
	s.P50 = Percentile(ms, 50)
	s.P90 = Percentile(ms, 90)
	s.P99 = Percentile(ms, 99)
	s.P999 = Percentile(ms, 99.9)
	s.Max = ms[len(ms)-1]
	return s
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted, which must be sorted ascending; NaN for an empty slice.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}
