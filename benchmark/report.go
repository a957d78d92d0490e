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
	} `json:"workload"`
	Baseline string   `json:"baseline"`
	Results  []Result `json:"results"`
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

// WriteSVG plots, for every system, the share of closes later than x
// (a complementary CDF) against x on a log axis: the further a curve
// reaches right, the longer its tail.
func (r *Report) WriteSVG(path string) error {
	if !strings.HasSuffix(path, ".svg") {
		return fmt.Errorf("--plot %q: only .svg is supported", path)
	}
	const (
		width, height = 900, 520
		left, right   = 70, 200
		top, bottom   = 40, 60
	)
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
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="22" font-size="15">Close lateness (closed_at − deadline): share of closes later than x</text>`+"\n", left)
	for e := math.Log10(minX); e <= math.Log10(maxX)+1e-9; e++ {
		v := math.Pow(10, math.Ceil(e))
		x := xOf(v)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, top, x, height-bottom, x, height-bottom+16, msLabel(v))
	}
	for s := 1.0; s >= minY; s /= 10 {
		y := yOf(s)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", left, y, width-right, y, left-6, y+4, s)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">lateness (log scale)</text>`+"\n", float64(left)+pw/2, height-20)
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
		var pts []string
		n := float64(len(ms))
		for j := 0; j < len(ms); j++ {
			if j+1 < len(ms) && ms[j+1] == ms[j] {
				continue // one point per distinct value: the share above it
			}
			share := (n - float64(j+1)) / n
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", xOf(ms[j]), yOf((n-float64(j))/n), xOf(ms[j]), yOf(share)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%.1f,%.1f %s"/>`+"\n", c, xOf(minX), yOf(1), strings.Join(pts, " "))
		ly := top + 14 + 18*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s (p99 %.0f ms)</text>`+"\n", width-right+10, ly, width-right+30, ly, c, width-right+36, ly+4, res.System, res.Lateness.P99)
	}
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
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
