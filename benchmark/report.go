package benchmark

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the whole run, as written by --json.
type Report struct {
	Started  time.Time `json:"started"`
	Machine  Machine   `json:"machine"`
	Workload struct {
		Rate         int     `json:"rate"`
		Duration     string  `json:"duration"`
		Timeouts     string  `json:"timeouts"`
		PayFraction  float64 `json:"pay_fraction"`
		RaceFraction float64 `json:"race_fraction"`
		Grace        string  `json:"grace"`
		RemindBefore string  `json:"remind_before,omitempty"`
	} `json:"workload"`
	Baseline string   `json:"baseline"`
	Results  []Result `json:"results"`
	// Timers are the results of the timers workload (--kind timers).
	Timers []TimerResult `json:"timers,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	MemoryMB  int64  `json:"memory_mb"`
	GoVersion string `json:"go_version"`
	CPUModel  string `json:"cpu_model"`
}

// NewReport starts a report for workload w.
func NewReport(w Workload, started time.Time, m Machine) *Report {
	r := &Report{Started: started, Machine: m}
	r.Workload.Rate = w.Rate
	r.Workload.Duration = w.Duration.String()
	r.Workload.Timeouts = w.Timeouts.String()
	r.Workload.PayFraction = w.PayFraction
	r.Workload.RaceFraction = w.RaceFraction
	r.Workload.Grace = w.Grace.String()
	if w.RemindBefore > 0 {
		r.Workload.RemindBefore = w.RemindBefore.String()
	}
	return r
}

// WriteTable prints the human table, with each system's p99 lateness as a
// ratio against the baseline (the first result, hourglass's default engine).
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\torders\tcreates/s\tcreate p99\tlate p50\tp99\tp99.9\tmax\tearly\tlost\tswept\tnoop\tdup\tpaid&closed\tinvariant\tCPU s\tpeak RSS\tB/timer\tp99 vs base\t")
	var base float64
	for i, res := range r.Results {
		if res.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", res.System, "error: "+res.Error)
			continue
		}
		if i == 0 || base == 0 {
			base = math.Max(res.Lateness.P99, 1) // lateness is in whole ms: 0 means < 1 ms
		}
		inv := "ok"
		if !res.InvariantOK {
			inv = "BROKEN"
		}
		bpt := "-"
		if res.BytesPerPendingTimer > 0 {
			bpt = fmt.Sprintf("%.0f", res.BytesPerPendingTimer)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1fms\t%.0fms\t%.0fms\t%.0fms\t%.0fms\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.1f\t%.0fMB\t%s\t%s\t\n",
			res.System, res.Orders, res.Throughput, res.Create.P99, res.Lateness.P50, res.Lateness.P99, res.Lateness.P999, res.Lateness.Max,
			res.Lateness.Early, res.Lost, res.Recovered, res.NoopDeliveries, res.DuplicateEffects, res.PaidAndClosed, inv,
			res.CPUSeconds, res.PeakRSSMB, bpt, capped(res, ratio(math.Max(res.Lateness.P99, 1), base, i == 0)))
	}
	tw.Flush()
	fmt.Fprintln(w, "lateness = closed_at − deadline, in whole ms (the unit deadlines are stored in); lost = not closed by the mechanism within the grace;")
	fmt.Fprintln(w, "swept = of those, closed by the sweeper; noop = deliveries for orders already paid/closed; dup = orders closed twice (from the stock invariant).")
	for _, res := range r.Results {
		for _, v := range res.Violations {
			fmt.Fprintf(w, "%s: VIOLATION: %s\n", res.System, v)
		}
	}
}

// capped marks a ratio as a lower bound when the system lost orders: the
// sweeper closed them at deadline + grace, so its real tail is longer than
// the one measured.
func capped(res Result, ratio string) string {
	if res.Lost > 0 && strings.HasSuffix(ratio, "higher") {
		return "≥" + ratio + " (lost)"
	}
	return ratio
}

func ratio(v, base float64, isBase bool) string {
	switch {
	case isBase:
		return "baseline"
	case v >= base:
		return fmt.Sprintf("%.1f× higher", v/base)
	}
	return fmt.Sprintf("%.1f× lower", base/v)
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// WritePlot plots, for every system, the share of closes later than x (a
// complementary CDF) against x on a log axis: the further a curve reaches
// right, the longer its tail. The format follows the extension: .svg or .png.
func (r *Report) WritePlot(path string) error {
	m := r.plotModel()
	var (
		out []byte
		err error
	)
	switch {
	case strings.HasSuffix(path, ".svg"):
		out = m.svg()
	case strings.HasSuffix(path, ".png"):
		out, err = m.png()
	default:
		return fmt.Errorf("--plot %q: want a file ending in .svg or .png", path)
	}
	if err != nil {
		return fmt.Errorf("--plot: %w", err)
	}
	return os.WriteFile(path, out, 0o644)
}

func (r *Report) plotModel() *plot {
	const (
		width, height = 900, 520
		left, right   = 70, 200
		top, bottom   = 40, 60
	)
	m := &plot{w: width, h: height}
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	minX, maxX := 0.5, 1.0 // ms; 0 ms closes are drawn at 0.5 ms
	for _, res := range r.Results {
		for _, d := range res.lateness {
			maxX = math.Max(maxX, float64(d)/float64(time.Millisecond))
		}
	}
	maxX = math.Pow(10, math.Ceil(math.Log10(maxX)))
	xOf := func(ms float64) float64 {
		ms = math.Max(ms, minX)
		return float64(left) + pw*(math.Log10(ms)-math.Log10(minX))/(math.Log10(maxX)-math.Log10(minX))
	}
	// y: share of closes with lateness > x, on a log axis from 1 to 1e-4.
	const minY = 1e-4
	yOf := func(share float64) float64 {
		share = math.Max(share, minY)
		return float64(top) + ph*(-math.Log10(share))/(-math.Log10(minY))
	}
	m.text(float64(left), 22, "Close lateness (closed_at − deadline): share of closes later than x", "start", 15)
	for e := math.Log10(minX); e <= math.Log10(maxX)+1e-9; e++ {
		v := math.Pow(10, math.Ceil(e))
		x := xOf(v)
		m.line([][2]float64{{x, top}, {x, height - bottom}}, "#dddddd", 1)
		m.text(x, height-bottom+16, msLabel(v), "middle", 12)
	}
	for s := 1.0; s >= minY; s /= 10 {
		y := yOf(s)
		m.line([][2]float64{{left, y}, {width - right, y}}, "#dddddd", 1)
		m.text(left-6, y+4, fmt.Sprintf("%g", s), "end", 12)
	}
	m.text(float64(left)+pw/2, height-20, "lateness (log scale)", "middle", 12)
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000"}
	for i, res := range r.Results {
		if len(res.lateness) == 0 {
			continue
		}
		ms := make([]float64, len(res.lateness))
		for j, d := range res.lateness {
			ms[j] = float64(d) / float64(time.Millisecond)
		}
		slices.Sort(ms)
		c := colors[i%len(colors)]
		pts := [][2]float64{{xOf(minX), yOf(1)}}
		n := float64(len(ms))
		// A step function: at each distinct value x, the share of closes
		// later than x drops from what it was just below x (all from the
		// value's first occurrence on) to what lies beyond its last one.
		first := 0
		for j := 0; j < len(ms); j++ {
			if j+1 < len(ms) && ms[j+1] == ms[j] {
				continue
			}
			pts = append(pts, [2]float64{xOf(ms[j]), yOf((n - float64(first)) / n)}, [2]float64{xOf(ms[j]), yOf((n - float64(j+1)) / n)})
			first = j + 1
		}
		m.line(pts, c, 2)
		ly := float64(top + 14 + 18*i)
		m.line([][2]float64{{width - right + 10, ly}, {width - right + 30, ly}}, c, 3)
		m.text(width-right+36, ly+4, fmt.Sprintf("%s (p99 %.0f ms)", res.System, res.Lateness.P99), "start", 12)
	}
	return m
}

func msLabel(ms float64) string {
	switch {
	case ms < 1:
		return fmt.Sprintf("%gms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.0fs", ms/1000)
}
