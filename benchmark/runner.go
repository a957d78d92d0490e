package benchmark

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hourglass/hourglass"
)

// Target is a system under test as the workload sees it: the in-process
// engine with one delay mechanism, or a running server over HTTP.
type Target interface {
	// Create places an order of qty units of sku with the timeout and,
	// when remindBefore is not zero, that reminder lead (its order.expiring
	// due at deadline − remindBefore); zero leaves the lead to the policy.
	Create(ctx context.Context, sku string, qty int64, timeout, remindBefore time.Duration) (hourglass.Order, error)
	// Expiring returns the created_at of each order.expiring event of order
	// id, oldest first, as its history stores them.
	Expiring(ctx context.Context, id int64) ([]time.Time, error)
	// Pay pays an order; paid is false when the order was not payable.
	Pay(ctx context.Context, id int64) (paid bool, err error)
	// Order reads an order as stored (not its View).
	Order(ctx context.Context, id int64) (hourglass.Order, error)
	// Product reads a product.
	Product(ctx context.Context, sku string) (hourglass.Product, error)
	// PutProduct sets a product's available stock.
	PutProduct(ctx context.Context, p hourglass.Product) error
}

// Result is every figure measured for one system.
type Result struct {
	System   string `json:"system"`
	Orders   int    `json:"orders"`
	Paid     int    `json:"paid"`
	Closed   int    `json:"closed"`
	Duration string `json:"duration"`
	// Create is the latency of scheduling an order (its durable create plus
	// handing its timer to the mechanism); Throughput what was achieved.
	Create     Summary `json:"create_latency"`
	Throughput float64 `json:"creates_per_s"`
	// Lateness is closed_at − deadline over every closed order.
	Lateness Summary `json:"close_lateness"`
	// Lost: not closed by deadline + grace by the mechanism (the sweeper,
	// or nothing, closed it). Recovered: of those, closed by the sweeper.
	Lost      int `json:"lost"`
	Recovered int `json:"recovered_by_sweeper"`
	// NoopDeliveries: timers delivered for orders already paid or closed
	// (stale timers, redeliveries); each was a no-op close.
	NoopDeliveries int `json:"noop_deliveries"`
	// DuplicateEffects counts orders closed twice, detected by the stock
	// invariant; PaidAndClosed orders both paid and closed.
	DuplicateEffects int      `json:"duplicate_effects"`
	PaidAndClosed    int      `json:"paid_and_closed"`
	RaceAttempts     int      `json:"race_payments"`
	RacePaid         int      `json:"race_payments_accepted"`
	InvariantOK      bool     `json:"invariant_ok"`
	Violations       []string `json:"violations,omitempty"`
	CPUSeconds       float64  `json:"cpu_seconds"`
	PeakRSSMB        float64  `json:"peak_rss_mb"`
	// BytesPerPendingTimer at PendingCount timers held, for in-memory
	// mechanisms; 0 when not measured (a broker holds the timers).
	BytesPerPendingTimer float64 `json:"bytes_per_pending_timer,omitempty"`
	PendingCount         int     `json:"pending_count,omitempty"`
	// Reminders are the order.expiring figures of a run with a reminder
	// lead (Workload.RemindBefore); nil without one.
	Reminders *ReminderResult `json:"reminders,omitempty"`
	Error     string          `json:"error,omitempty"`
	lateness  []time.Duration
}

// Progress is told how many orders were created so far out of the total.
type Progress func(system string, created, total int, phase string)

// Drive runs the workload against target and checks the outcome. swept, if
// set, reports how many orders the sweeper closed (in-process only);
// noops how many deliveries were no-ops.
func Drive(ctx context.Context, name string, target Target, w Workload, progress Progress, swept, noops func() int) (Result, error) {
	res := Result{System: name}
	const sku = "BENCH"
	const initial = int64(1) << 40
	if err := target.PutProduct(ctx, hourglass.Product{SKU: sku, Name: "bench", Category: "bench", Available: initial}); err != nil {
		return res, fmt.Errorf("put product: %w", err)
	}
	before := product(ctx, target, sku)
	r := rand.New(rand.NewPCG(w.Seed, 1))
	total := int(float64(w.Rate) * w.Duration.Seconds())
	var (
		mu        sync.Mutex
		created   []hourglass.Order
		createLat []time.Duration
		paid      = map[int64]bool{}
		race      atomic.Int64
		racePaid  atomic.Int64
		errs      atomic.Int64
		firstErr  atomic.Value
		wg        sync.WaitGroup
		inflight  atomic.Int64
	)
	fail := func(err error) {
		if errs.Add(1) == 1 {
			firstErr.Store(err)
		}
	}
	cpu0 := cpuSeconds()
	resetPeakRSS()
	createdIn, err := openLoop(w.Rate, total, &inflight, func() {
		timeout := w.Timeouts.Draw(r)
		pay := r.Float64() < w.PayFraction
		racing := pay && r.Float64() < w.RaceFraction
		jitter := time.Duration(r.Int64N(2*int64(w.RaceJitter)+1)) - w.RaceJitter
		early := time.Duration(r.Float64() * 0.5 * float64(timeout))
		inflight.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			t0 := time.Now()
			o, err := target.Create(ctx, sku, 1, timeout, w.RemindBefore)
			lat := time.Since(t0)
			if err != nil {
				fail(fmt.Errorf("create: %w", err))
				return
			}
			mu.Lock()
			created = append(created, o)
			createLat = append(createLat, lat)
			mu.Unlock()
			if !pay {
				return
			}
			at := o.CreatedAt.Add(early)
			if racing {
				race.Add(1)
				at = o.Deadline.Add(jitter)
			}
			time.Sleep(time.Until(at))
			ok, err := target.Pay(ctx, o.ID)
			if err != nil {
				fail(fmt.Errorf("pay: %w", err))
				return
			}
			if ok {
				if racing {
					racePaid.Add(1)
				}
				mu.Lock()
				paid[o.ID] = true
				mu.Unlock()
			}
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
		return res, fmt.Errorf("%d requests failed; first: %v", n, firstErr.Load())
	}
	// Wait for every deadline plus the grace, then read the outcome.
	var last time.Time
	for _, o := range created {
		last = maxTime(last, o.Deadline)
	}
	if err := waitUntil(ctx, last.Add(w.Grace), func(left time.Duration) {
		if progress != nil {
			progress(name, total, total, fmt.Sprintf("waiting %s for the last deadlines", left))
		}
	}); err != nil {
		return res, err
	}
	res.CPUSeconds = cpuSeconds() - cpu0
	res.PeakRSSMB = float64(peakRSS()) / (1 << 20)
	res.Duration = createdIn.Round(time.Millisecond).String()
	res.Orders = len(created)
	res.Create = Summarize(createLat)
	res.Throughput = float64(len(created)) / createdIn.Seconds()
	res.RaceAttempts, res.RacePaid = int(race.Load()), int(racePaid.Load())

	final := make([]hourglass.Order, 0, len(created))
	for i, o := range created {
		got, err := target.Order(ctx, o.ID)
		if err != nil {
			return res, fmt.Errorf("read order %d: %w", o.ID, err)
		}
		final = append(final, got)
		if progress != nil && i%1000 == 0 {
			progress(name, total, total, "checking")
		}
	}
	for _, o := range final {
		switch o.Status {
		case hourglass.StateClosed:
			res.Closed++
			late := o.ClosedAt.Sub(o.Deadline)
			res.lateness = append(res.lateness, late)
			if late > w.Grace {
				res.Lost++
			}
		case hourglass.StatePaid:
			res.Paid++
			if !paid[o.ID] {
				res.Violations = append(res.Violations, fmt.Sprintf("order %d is paid but its payment was refused", o.ID))
			}
		case hourglass.StatePendingPayment:
			res.Lost++ // past deadline + grace and still not closed
		}
		if paid[o.ID] && o.Status != hourglass.StatePaid {
			res.Violations = append(res.Violations, fmt.Sprintf("order %d's payment was accepted but it is %s", o.ID, o.Status))
		}
		if !o.PaidAt.IsZero() && !o.ClosedAt.IsZero() {
			res.PaidAndClosed++
		}
	}
	res.Lateness = Summarize(res.lateness)
	if w.RemindBefore > 0 {
		if progress != nil {
			progress(name, total, total, "checking reminders")
		}
		expiring, err := readExpiring(ctx, target, final)
		if err != nil {
			return res, err
		}
		m, violations := CheckReminders(w.RemindBefore, final, expiring)
		res.Reminders = &m
		res.Violations = append(res.Violations, violations...)
	}
	if swept != nil {
		res.Recovered = swept()
		res.Lost = max(res.Lost, res.Recovered)
	}
	if noops != nil {
		res.NoopDeliveries = noops()
	}
	after := product(ctx, target, sku)
	// The run's own stock: what this run's orders hold must balance.
	delta := hourglass.Product{SKU: sku,
		Available: after.Available - before.Available + int64(len(created)),
		Reserved:  after.Reserved - before.Reserved,
		Sold:      after.Sold - before.Sold,
	}
	for _, err := range CheckInvariant(map[string]StockCheck{sku: {Initial: int64(len(created)), Product: delta}}, final) {
		res.Violations = append(res.Violations, err.Error())
	}
	// Every unpaid order gives its unit back exactly once; more than that
	// came back only if some order was closed (released) twice.
	if dups := delta.Available - int64(len(created)-res.Paid); dups > 0 {
		res.DuplicateEffects = int(dups)
	}
	res.InvariantOK = len(res.Violations) == 0
	return res, nil
}

// maxInFlight is how many requests may wait for their answer before a run
// gives up: the system cannot keep up with --rate.
const maxInFlight = 20000

// openLoop calls issue total times, evenly spread at rate per second from
// now, and returns how long that took. It is open loop: issue must start
// its request and return without waiting for the answer, so a slow system
// cannot slow the generator down and hide its latency. inflight counts the
// requests not answered yet; when it exceeds maxInFlight, openLoop stops
// with an error. tick, if set, is told the count issued so far about every
// 100ms.
func openLoop(rate, total int, inflight *atomic.Int64, issue func(), tick func(issued int)) (time.Duration, error) {
	start := time.Now()
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	issued := 0
	lastTick := time.Time{}
	for issued < total {
		now := <-t.C
		due := min(total, int(float64(rate)*now.Sub(start).Seconds()))
		for ; issued < due; issued++ {
			if inflight.Load() > maxInFlight {
				return time.Since(start), fmt.Errorf("more than %d requests in flight: the system cannot keep up with --rate", maxInFlight)
			}
			issue()
		}
		if tick != nil && now.Sub(lastTick) > 100*time.Millisecond {
			tick(issued)
			lastTick = now
		}
	}
	return time.Since(start), nil
}

func product(ctx context.Context, t Target, sku string) hourglass.Product {
	p, _ := t.Product(ctx, sku)
	return p
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// cpuSeconds returns this process's user+system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// resetPeakRSS resets the kernel's peak-RSS mark (Linux), so each system's
// peak is its own.
func resetPeakRSS() {
	// Give the previous system's heap back to the OS first, so its residue
	// does not count as this system's peak.
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS returns VmHWM in bytes (0 where unavailable).
func peakRSS() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// waitUntil waits until at, telling report how long is left (rounded to the
// second) every 200 ms; it returns ctx's error if ctx ends first.
func waitUntil(ctx context.Context, at time.Time, report func(left time.Duration)) error {
	for time.Now().Before(at) {
		report(time.Until(at).Round(time.Second))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}
