package benchmark

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay"
	"github.com/hourglass/hourglass/store"
)

// Command is `hourglass bench`: its flags (kong tags) and its run.
type Command struct {
	Kind          string        `help:"What to drive: orders (created, some paid, closed at their deadline), timers (clients' named timers armed with PUT /v1/timers/{key} and delay_ms --timeout, unique keys per run, fired at fire_at), or orders,timers (both on each system, one after the other, each on a fresh database, the timers' p99 compared with the orders' in the same run)." default:"orders"`
	Rate          int           `help:"Orders created (or timers armed) per second (open loop: a slow system cannot slow the generator)." default:"2000"`
	Duration      time.Duration `help:"How long orders are created (or timers armed)." default:"10s"`
	Timeout       string        `help:"Order timeouts, or with --kind timers the timers' delay: a duration (2s), a uniform range (1s..10s), or mix (virtual 5 min / physical 30 min, scaled by --time-scale)." default:"2s"`
	TimeScale     float64       `help:"Scale of the mix's 5 min / 30 min timeouts." default:"0.01"`
	PayFraction   float64       `help:"Share of orders paid." default:"0.3"`
	RaceFraction  float64       `help:"Share of payments aimed at the deadline ± --race-jitter, to stress the pay/close race." default:"0.2"`
	RaceJitter    time.Duration `help:"Spread of racing payments around the deadline." default:"5ms"`
	Grace         time.Duration `help:"An order not closed by deadline + grace counts as lost by the mechanism." default:"5s"`
	RemindBefore  time.Duration `help:"Create every order with this reminder lead (remind_before_ms, e.g. half the --timeout) and measure its order.expiring (issue #41), read back from each order's history: lateness (created_at − remind_at) beside the closes', and none early, none for an order paid before its reminder time, none twice, none missing. 0: no reminders." name:"remind-before"`
	Backends      string        `help:"Comma-separated delay mechanisms to run in-process, one after another." default:"wheel,heap,gotimer,sqlpoll"`
	Target        []string      `help:"Drive a running server over its API instead (black-box), e.g. http://127.0.0.1:8080. Repeat it for the nodes of a cluster: requests go round-robin over them."`
	APIToken      string        `help:"Token for --target." env:"HOURGLASS_API_TOKEN"`
	Pending       int           `help:"Also measure memory per pending timer with this many timers held (in-memory mechanisms)."`
	JSON          string        `help:"Write every figure to this JSON file."`
	Plot          string        `help:"Write the lateness distributions of all systems to this .svg or .png file."`
	Seed          uint64        `help:"Random seed of the workload." default:"1"`
	DatabaseURL   []string      `help:"Run every mechanism on each of these stores (a new scratch database on each server, dropped afterwards); '' or sqlite is the embedded SQLite. Repeat the flag to compare stores." name:"database-url" sep:"none" default:""`
	Burst         int           `help:"Run the mass-expiry workload instead: this many orders for one SKU, all due at one instant (created as fast as the store allows), closed at default settings on each of --backends; 0 runs the steady workload."`
	BurstWebhooks string        `help:"With --burst: comma-separated webhook counts (to a local receiver) to run the burst with, to show the fan-out's cost." default:"0,5"`
	CPUProfile    string        `help:"Write a CPU profile of the whole run (every system) to this file, for go tool pprof." name:"cpuprofile" type:"path"`
	delay.Flags   `embed:""`
}

// Run runs the workload on the --target server or on each of --backends,
// one after another, then on each of peers (systems outside hourglass, such
// as the bench/ module's asynq and River), and prints the table. It returns
// an error if a system failed or broke the stock invariant.
func (b *Command) Run(ctx context.Context, log *slog.Logger, peers []System) error {
	timeouts, err := ParseTimeouts(b.Timeout, b.TimeScale)
	if err != nil {
		return err
	}
	w := Workload{Rate: b.Rate, Duration: b.Duration, Timeouts: timeouts, PayFraction: b.PayFraction,
		RaceFraction: b.RaceFraction, RaceJitter: b.RaceJitter, Grace: b.Grace, RemindBefore: b.RemindBefore, Seed: b.Seed}
	if err := w.Validate(); err != nil {
		return err
	}
	if b.CPUProfile != "" {
		f, err := os.Create(b.CPUProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if b.Burst > 0 {
		if b.RemindBefore > 0 {
			return fmt.Errorf("--remind-before runs with the steady workload: drop --burst")
		}
		return b.runBurst(ctx, log)
	}
	kinds, err := ParseKinds(b.Kind)
	if err != nil {
		return err
	}
	var names []string
	if len(b.Target) == 0 {
		for _, n := range strings.Split(b.Backends, ",") {
			n = strings.TrimSpace(n)
			if !delay.Valid(n) {
				return fmt.Errorf("--backends: unknown mechanism %q (want some of %s)", n, strings.Join(delay.Names(), ", "))
			}
			names = append(names, n)
		}
	}
	report := NewReport(w, time.Now(), machine())
	if slices.Contains(kinds, KindOrders) {
		fmt.Fprintf(os.Stderr, "workload: %d orders/s for %s, timeouts %s, %.0f%% paid (%.0f%% of those at the deadline ±%s)\n",
			w.Rate, w.Duration, timeouts, 100*w.PayFraction, 100*w.RaceFraction, w.RaceJitter)
		if w.RemindBefore > 0 {
			fmt.Fprintf(os.Stderr, "reminders: order.expiring %s before each deadline\n", w.RemindBefore)
		}
	}
	if slices.Contains(kinds, KindTimers) {
		fmt.Fprintf(os.Stderr, "workload: %d timers armed/s for %s, delays %s\n", w.Rate, w.Duration, timeouts)
	}
	tty := false
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		tty = true
	}
	lastPhase := ""
	progress := func(system string, done, total int, phase string) {
		if !tty { // a log, not a terminal: one line per phase
			if p := system + " " + strings.Fields(phase)[0]; p != lastPhase {
				lastPhase = p
				fmt.Fprintf(os.Stderr, "%s: %s (%d/%d orders)\n", system, strings.Fields(phase)[0], done, total)
			}
			return
		}
		const width = 30
		filled := width * done / max(total, 1)
		fmt.Fprintf(os.Stderr, "\r\033[K%-14s [%s%s] %d/%d %s", system, strings.Repeat("#", filled), strings.Repeat(".", width-filled), done, total, phase)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	if len(b.Target) > 0 {
		targets := make([]Target, len(b.Target))
		for i, u := range b.Target {
			targets[i] = NewHTTPTarget(u, b.APIToken)
		}
		name := strings.Join(b.Target, ",")
		for _, kind := range kinds {
			switch kind {
			case KindOrders:
				res, err := Drive(ctx, name, NewRoundRobin(targets...), w, progress, nil, nil)
				if err != nil {
					res.Error = err.Error()
				}
				report.Results = append(report.Results, res)
			case KindTimers:
				res, err := DriveTimers(ctx, name, NewRoundRobin(targets...), w, progress, nil, nil)
				if err != nil {
					res.Error = err.Error()
				}
				report.Timers = append(report.Timers, res)
			}
			if tty {
				fmt.Fprintln(os.Stderr)
			}
		}
	}
	systems := make([]System, 0, len(names)+len(peers))
	for _, name := range names {
		systems = append(systems, System{Name: name, Feed: delay.FeedOf(name), Open: func(ctx context.Context, store hourglass.Store) (hourglass.Scheduler, error) {
			o := b.Flags.Options(store, hourglass.SystemClock{}, quiet)
			o.Namespace = fmt.Sprintf("%s-bench-%d", b.DelayNamespace, time.Now().UnixNano())
			return delay.Open(ctx, name, o)
		}})
	}
	databases, err := b.databases()
	if err != nil {
		return err
	}
	for _, db := range databases {
		for _, sys := range append(systems, peers...) {
			if len(databases) > 1 || db.kind != store.KindSQLite {
				sys.Name += "@" + db.kind
			}
			name := sys.Name
			for _, kind := range kinds {
				switch kind {
				case KindOrders:
					res, err := RunInProcess(ctx, sys, db.url, w, b.Pending, progress)
					if err != nil {
						res.System, res.Error = name, err.Error()
						log.Warn("bench: system failed", "system", name, "err", err)
					}
					report.Results = append(report.Results, res)
				case KindTimers:
					res, err := RunTimersInProcess(ctx, sys, db.url, w, progress)
					if err != nil {
						res.System, res.Error = name, err.Error()
						log.Warn("bench: system failed (timers)", "system", name, "err", err)
					}
					report.Timers = append(report.Timers, res)
				}
				if tty {
					fmt.Fprintln(os.Stderr)
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	if len(report.Results) > 0 {
		report.Baseline = report.Results[0].System
	}
	if len(report.Results) > 0 {
		report.WriteTable(os.Stdout)
	}
	if hasReminders(report.Results) {
		report.WriteReminderTable(os.Stdout)
	}
	if len(report.Timers) > 0 {
		report.WriteTimerTable(os.Stdout)
	}
	if b.JSON != "" {
		if err := report.WriteJSON(b.JSON); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	if b.Plot != "" {
		if err := report.WritePlot(b.Plot); err != nil {
			return err
		}
	}
	for _, r := range report.Results {
		if r.Error != "" || !r.InvariantOK {
			return fmt.Errorf("bench: %s failed (see above)", r.System)
		}
	}
	for _, r := range report.Timers {
		if r.Error != "" || !r.InvariantOK {
			return fmt.Errorf("bench: %s failed the timers workload (see above)", r.System)
		}
	}
	return nil
}

// ParseKinds parses --kind: "orders", "timers", or both comma-separated, in
// the order given.
func ParseKinds(s string) ([]string, error) {
	var kinds []string
	for _, k := range strings.Split(s, ",") {
		k = strings.TrimSpace(k)
		if k != KindOrders && k != KindTimers || slices.Contains(kinds, k) {
			return nil, fmt.Errorf("--kind %q: want orders, timers, or orders,timers", s)
		}
		kinds = append(kinds, k)
	}
	return kinds, nil
}

type benchDatabase struct{ kind, url string }

// databases returns the stores of --database-url, in order.
func (b *Command) databases() ([]benchDatabase, error) {
	urls := b.DatabaseURL
	if len(urls) == 0 {
		urls = []string{""}
	}
	out := make([]benchDatabase, 0, len(urls))
	for _, u := range urls {
		if u == "sqlite" {
			u = ""
		}
		kind, err := store.Kind(u)
		if err != nil {
			return nil, fmt.Errorf("--database-url: %w", err)
		}
		out = append(out, benchDatabase{kind: kind, url: u})
	}
	return out, nil
}

func machine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				m.MemoryMB = kb >> 10
			}
		}
	}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return m
}

// runBurst runs the mass-expiry workload on every backend and store, once
// per --burst-webhooks count, and prints one table.
func (b *Command) runBurst(ctx context.Context, log *slog.Logger) error {
	if len(b.Target) > 0 {
		return fmt.Errorf("--burst runs in-process: drop --target")
	}
	var hooks []int
	for _, f := range strings.Split(b.BurstWebhooks, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 100 {
			return fmt.Errorf("--burst-webhooks: want comma-separated counts 0..100, got %q", f)
		}
		hooks = append(hooks, n)
	}
	databases, err := b.databases()
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	m := machine()
	fmt.Fprintf(os.Stderr, "burst: %d orders due at one instant; %s, %d CPUs\n", b.Burst, m.CPUModel, m.CPUs)
	var results []BurstResult
	failed := false
	for _, db := range databases {
		for _, n := range strings.Split(b.Backends, ",") {
			n = strings.TrimSpace(n)
			if !delay.Valid(n) {
				return fmt.Errorf("--backends: unknown mechanism %q (want some of %s)", n, strings.Join(delay.Names(), ", "))
			}
			sys := System{Name: n, Feed: delay.FeedOf(n), Open: func(ctx context.Context, store hourglass.Store) (hourglass.Scheduler, error) {
				o := b.Flags.Options(store, hourglass.SystemClock{}, quiet)
				o.Namespace = fmt.Sprintf("%s-bench-%d", b.DelayNamespace, time.Now().UnixNano())
				return delay.Open(ctx, n, o)
			}}
			if len(databases) > 1 || db.kind != store.KindSQLite {
				sys.Name += "@" + db.kind
			}
			for _, h := range hooks {
				w := BurstWorkload{Orders: b.Burst, Webhooks: h, BoundaryPays: 100, ProbeRate: 200}
				progress := func(system string, done, total int, phase string) {
					if done == 0 || done == total {
						fmt.Fprintf(os.Stderr, "%s (%d webhooks): %s\n", system, h, phase)
					}
				}
				res, err := RunBurst(ctx, sys, db.url, w, progress)
				if err != nil {
					res.Error, failed = err.Error(), true
					log.Warn("bench: burst failed", "system", sys.Name, "webhooks", h, "err", err)
				}
				results = append(results, res)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	WriteBurstTable(os.Stdout, results)
	if failed {
		return fmt.Errorf("bench: a burst run failed (see above)")
	}
	return nil
}
