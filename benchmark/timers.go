package benchmark

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/webhook"
)

// Workload kinds of `hourglass bench --kind`.
const (
	// KindOrders creates orders and measures their close lateness.
	KindOrders = "orders"
	// KindTimers arms clients' named timers (issue #12) and measures their
	// fire lateness.
	KindTimers = "timers"
)

// TimerTarget is a system under test as the timers workload sees it: the
// in-process store and engine, or a running server over HTTP.
type TimerTarget interface {
	// ArmTimer arms the new timer key to fire delay after the server's now.
	ArmTimer(ctx context.Context, key string, delay time.Duration) (hourglass.Timer, error)
	// Timers returns up to limit timers with keys greater than after
	// (bytewise), in key order.
	Timers(ctx context.Context, after string, limit int) ([]hourglass.Timer, error)
}

// TimerResult is every figure measured for one system under the timers
// workload.
type TimerResult struct {
	System   string `json:"system"`
	Armed    int    `json:"armed"`
	Fired    int    `json:"fired"`
	Duration string `json:"duration"`
	// Arm is the latency of arming a timer (its durable write plus handing
	// it to the mechanism); ArmThroughput the arms per second achieved.
	Arm           Summary `json:"arm_latency"`
	ArmThroughput float64 `json:"armed_per_s"`
	// FireThroughput is fired timers per second, between the first and
	// the last fired_at.
	FireThroughput float64 `json:"fired_per_s"`
	// Lateness is fired_at − fire_at over every fired timer, as stored.
	Lateness Summary `json:"fire_lateness"`
	// Lost: not fired by fire_at + grace by the mechanism (the sweeper,
	// or nothing, fired it). Recovered: fires the sweeper made (in-process
	// only).
	Lost      int `json:"lost"`
	Recovered int `json:"recovered_by_sweeper"`
	// DuplicateFires counts timers the engine reported fired more than once
	// (in-process only: over HTTP a second fire is not visible).
	DuplicateFires int      `json:"duplicate_fires"`
	InvariantOK    bool     `json:"invariant_ok"`
	Violations     []string `json:"violations,omitempty"`
	CPUSeconds     float64  `json:"cpu_seconds"`
	PeakRSSMB      float64  `json:"peak_rss_mb"`
	Error          string   `json:"error,omitempty"`
	lateness       []time.Duration
}

// timerKeyPrefix returns a key prefix no earlier run used, so runs against
// a live server do not re-arm each other's timers.
func timerKeyPrefix(now time.Time) string {
	return "bench-" + strconv.FormatInt(now.UnixNano(), 36) + "-"
}

// DriveTimers runs the timers workload against target and checks the
// outcome: w.Rate new timers per second (open loop) for w.Duration, each
// armed with a delay drawn from w.Timeouts under a key unique to the run;
// then, after the last fire_at + w.Grace, every timer of the run is read
// back. The invariant: every timer fired, none before its fire_at, none
// reported fired twice. fires, if set, reports how many times the engine
// fired a timer id, and swept how many fires its sweeper made (in-process
// only). w's payment fields are not used.
func DriveTimers(ctx context.Context, name string, target TimerTarget, w Workload, progress Progress, fires func(id int64) int, swept func() int) (TimerResult, error) {
	res := TimerResult{System: name}
	prefix := timerKeyPrefix(time.Now())
	r := rand.New(rand.NewPCG(w.Seed, 2))
	total := int(float64(w.Rate) * w.Duration.Seconds())
	var (
		mu       sync.Mutex
		armed    []hourglass.Timer
		armLat   []time.Duration
		errs     atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
		inflight atomic.Int64
	)
	cpu0 := cpuSeconds()
	resetPeakRSS()
	seq := 0
	armedIn, err := openLoop(w.Rate, total, &inflight, func() {
		key := fmt.Sprintf("%s%09d", prefix, seq)
		seq++
		delay := w.Timeouts.Draw(r)
		inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			t0 := time.Now()
			t, err := target.ArmTimer(ctx, key, delay)
			lat := time.Since(t0)
			if err != nil {
				if errs.Add(1) == 1 {
					firstErr.Store(fmt.Errorf("arm %s: %w", key, err))
				}
				return
			}
			mu.Lock()
			armed = append(armed, t)
			armLat = append(armLat, lat)
			mu.Unlock()
		}()
	}, func(issued int) {
		if progress != nil {
			progress(name, issued, total, "load")
		}
	})
	if err != nil {
		return res, err
	}
	wg.Wait()
	if n := errs.Load(); n > 0 {
		return res, fmt.Errorf("%d arms failed; first: %v", n, firstErr.Load())
	}
	var last time.Time
	for _, t := range armed {
		last = maxTime(last, t.FireAt)
	}
	if err := waitUntil(ctx, last.Add(w.Grace), func(left time.Duration) {
		if progress != nil {
			progress(name, total, total, fmt.Sprintf("waiting %s for the last timers", left))
		}
	}); err != nil {
		return res, err
	}
	res.CPUSeconds = cpuSeconds() - cpu0
	res.PeakRSSMB = float64(peakRSS()) / (1 << 20)
	res.Duration = armedIn.Round(time.Millisecond).String()
	res.Armed = len(armed)
	res.Arm = Summarize(armLat)
	res.ArmThroughput = float64(len(armed)) / armedIn.Seconds()

	if progress != nil {
		progress(name, total, total, "checking")
	}
	final, err := runTimers(ctx, target, prefix)
	if err != nil {
		return res, err
	}
	res.check(armed, final, w.Grace, fires)
	if swept != nil {
		res.Recovered = swept()
		res.Lost = max(res.Lost, res.Recovered)
	}
	return res, nil
}

// runTimers reads back every timer whose key starts with prefix, by key.
func runTimers(ctx context.Context, target TimerTarget, prefix string) (map[string]hourglass.Timer, error) {
	const page = api.MaxTimerLimit
	out := map[string]hourglass.Timer{}
	after := prefix
	for {
		ts, err := target.Timers(ctx, after, page)
		if err != nil {
			return out, fmt.Errorf("list timers after %s: %w", after, err)
		}
		for _, t := range ts {
			if !strings.HasPrefix(t.Key, prefix) {
				return out, nil // keys with the prefix sort together, right after it
			}
			out[t.Key] = t
		}
		if len(ts) < page {
			return out, nil
		}
		after = ts[len(ts)-1].Key
	}
}

// maxViolations is how many violations a TimerResult lists; the rest are
// counted.
const maxViolations = 20

// check fills in res's outcome from the timers armed and those read back.
func (res *TimerResult) check(armed []hourglass.Timer, final map[string]hourglass.Timer, grace time.Duration, fires func(id int64) int) {
	var first, last time.Time
	violations := 0
	violation := func(format string, args ...any) {
		if violations++; violations <= maxViolations {
			res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
		}
	}
	for _, a := range armed {
		t, ok := final[a.Key]
		if !ok {
			violation("timer %s was armed but is not listed", a.Key)
			continue
		}
		if !t.FireAt.Equal(a.FireAt) {
			violation("timer %s: fire_at %s, armed for %s", a.Key, t.FireAt.Format(time.RFC3339Nano), a.FireAt.Format(time.RFC3339Nano))
		}
		switch t.Status {
		case hourglass.TimerFired:
			res.Fired++
			late := t.FiredAt.Sub(t.FireAt)
			res.lateness = append(res.lateness, late)
			if late < 0 {
				violation("timer %s fired %s early", t.Key, -late)
			}
			if late > grace {
				res.Lost++
			}
			if first.IsZero() || t.FiredAt.Before(first) {
				first = t.FiredAt
			}
			last = maxTime(last, t.FiredAt)
		default:
			res.Lost++ // past fire_at + grace and not fired
			violation("timer %s is still %s %s after its fire_at", t.Key, t.Status, grace)
		}
		if fires != nil {
			if n := fires(t.ID); n > 1 {
				res.DuplicateFires++
				violation("timer %s was fired %d times", t.Key, n)
			}
		}
	}
	if violations > maxViolations {
		res.Violations = append(res.Violations, fmt.Sprintf("… and %d more", violations-maxViolations))
	}
	res.Lateness = Summarize(res.lateness)
	if span := last.Sub(first); res.Fired > 1 && span > 0 {
		res.FireThroughput = float64(res.Fired) / span.Seconds()
	}
	res.InvariantOK = violations == 0
}

// WriteTimerTable prints the timers table, with each system's p99 fire
// lateness as a ratio against the p99 close lateness of the orders run of
// the same system in this report, when there is one.
func (r *Report) WriteTimerTable(w io.Writer) {
	orders := map[string]Result{}
	for _, res := range r.Results {
		if res.Error == "" {
			orders[res.System] = res
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\ttimers\tarmed/s\tarm p99\tfired/s\tlate p50\tp90\tp99\tp99.9\tmax\tearly\tlost\tswept\tdup\tinvariant\tCPU s\tpeak RSS\torders' p99\tp99 vs orders\t")
	for _, res := range r.Timers {
		if res.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", res.System, "error: "+res.Error)
			continue
		}
		inv := "ok"
		if !res.InvariantOK {
			inv = "BROKEN"
		}
		vs, base := "-", "-"
		if o, ok := orders[res.System]; ok {
			base = fmt.Sprintf("%.0fms", o.Lateness.P99)
			// Lateness is in whole ms: 0 means < 1 ms, so compare from 1.
			vs = ratio(math.Max(res.Lateness.P99, 1), math.Max(o.Lateness.P99, 1), false)
			if res.Lateness.P99 <= 1 && o.Lateness.P99 <= 1 {
				vs = "same (≤1ms)"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.1fms\t%.0f\t%.0fms\t%.0fms\t%.0fms\t%.0fms\t%.0fms\t%d\t%d\t%d\t%d\t%s\t%.1f\t%.0fMB\t%s\t%s\t\n",
			res.System, res.Armed, res.ArmThroughput, res.Arm.P99, res.FireThroughput, res.Lateness.P50, res.Lateness.P90, res.Lateness.P99,
			res.Lateness.P999, res.Lateness.Max, res.Lateness.Early, res.Lost, res.Recovered, res.DuplicateFires, inv,
			res.CPUSeconds, res.PeakRSSMB, base, vs)
	}
	tw.Flush()
	fmt.Fprintln(w, "timers: lateness = fired_at − fire_at, in whole ms; lost = not fired by the mechanism within the grace; swept = fired by the sweeper;")
	fmt.Fprintln(w, "dup = timers the engine reported fired twice (in-process only); orders' p99 = close lateness of the orders run on the same system above.")
	for _, res := range r.Timers {
		for _, v := range res.Violations {
			fmt.Fprintf(w, "%s (timers): VIOLATION: %s\n", res.System, v)
		}
	}
}

// RunTimersInProcess runs the timers workload on sys with a fresh, empty
// database, as RunInProcess does the orders workload.
func RunTimersInProcess(ctx context.Context, sys System, databaseURL string, w Workload, progress Progress) (TimerResult, error) {
	obs := &counter{}
	run, err := startSystem(ctx, sys, databaseURL, engine.Config{SweepGrace: w.Grace, SweepInterval: 500 * time.Millisecond}, webhook.Config{}, obs)
	if err != nil {
		return TimerResult{System: sys.Name}, err
	}
	defer run.drop()
	res, err := DriveTimers(ctx, sys.Name, &storeTarget{store: run.db, timers: run.db}, w, progress, obs.firedCount, obs.timersSweptCount)
	run.stop()
	return res, err
}

// ArmTimer implements TimerTarget as PUT /v1/timers/{key} does, from the
// same request body.
func (t *storeTarget) ArmTimer(ctx context.Context, key string, delay time.Duration) (hourglass.Timer, error) {
	p, err := api.DecodeArmTimer(key, []byte(`{"delay_ms":`+strconv.FormatInt(delay.Milliseconds(), 10)+`}`), time.Now())
	if err != nil {
		return hourglass.Timer{}, err
	}
	nt, _, err := t.timers.ArmTimer(ctx, p)
	return nt, err
}

// Timers implements TimerTarget.
func (t *storeTarget) Timers(ctx context.Context, after string, limit int) ([]hourglass.Timer, error) {
	return t.timers.Timers(ctx, hourglass.TimerFilter{After: after, Limit: limit})
}

// ArmTimer implements TimerTarget: PUT /v1/timers/{key} with delay_ms.
func (t *HTTPTarget) ArmTimer(ctx context.Context, key string, delay time.Duration) (hourglass.Timer, error) {
	j, _, err := t.client.ArmTimer(ctx, key, api.ArmTimerRequest{DelayMs: api.Delay(delay)})
	if err != nil {
		return hourglass.Timer{}, err
	}
	return timerFromJSON(j)
}

// Timers implements TimerTarget: one page of GET /v1/timers.
func (t *HTTPTarget) Timers(ctx context.Context, after string, limit int) ([]hourglass.Timer, error) {
	l, err := t.client.ListTimers(ctx, "", limit, after)
	if err != nil {
		return nil, err
	}
	out := make([]hourglass.Timer, 0, len(l.Timers))
	for _, j := range l.Timers {
		nt, err := timerFromJSON(j)
		if err != nil {
			return out, err
		}
		out = append(out, nt)
	}
	return out, nil
}

func timerFromJSON(j api.TimerJSON) (hourglass.Timer, error) {
	t := hourglass.Timer{Key: j.Key, Status: hourglass.TimerStatus(j.Status), Payload: j.Payload}
	var err error
	if t.FireAt, err = time.Parse(api.TimeFormat, j.FireAt); err != nil {
		return t, fmt.Errorf("timer %s: fire_at: %w", j.Key, err)
	}
	if j.FiredAt != nil {
		if t.FiredAt, err = time.Parse(api.TimeFormat, *j.FiredAt); err != nil {
			return t, fmt.Errorf("timer %s: fired_at: %w", j.Key, err)
		}
	}
	return t, nil
}

// ArmTimer implements TimerTarget on the next target, which must be a
// TimerTarget too.
func (r *RoundRobin) ArmTimer(ctx context.Context, key string, delay time.Duration) (hourglass.Timer, error) {
	next := r.pick()
	tt, ok := next.(TimerTarget)
	if !ok {
		return hourglass.Timer{}, fmt.Errorf("bench: target %T does not arm timers", next)
	}
	return tt.ArmTimer(ctx, key, delay)
}

// Timers implements TimerTarget on the next target.
func (r *RoundRobin) Timers(ctx context.Context, after string, limit int) ([]hourglass.Timer, error) {
	next := r.pick()
	tt, ok := next.(TimerTarget)
	if !ok {
		return nil, fmt.Errorf("bench: target %T does not list timers", next)
	}
	return tt.Timers(ctx, after, limit)
}
