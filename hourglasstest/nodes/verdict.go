package nodes

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/store"
)

// Kinds of Problem a Verdict finds.
const (
	// ProblemLost: an acknowledged create whose order is not in the
	// database, or an order still pending after its deadline once the load
	// has settled.
	ProblemLost = "lost"
	// ProblemDuplicated: one create request (one Idempotency-Key) made
	// several orders, or an order no request of the load asked for.
	ProblemDuplicated = "duplicated"
	// ProblemPaidAndClosed: an order both paid and closed (by its fields
	// or its events).
	ProblemPaidAndClosed = "paid and closed"
	// ProblemContradicted: an order's end contradicts an acknowledged
	// answer: a pay answered 2xx whose order closed, a pay refused whose
	// order was paid, a status other than paid or closed.
	ProblemContradicted = "contradicted"
	// ProblemEarly: closed_at before the deadline.
	ProblemEarly = "closed early"
	// ProblemClosedTwice: more than one order.closed event, or a closed
	// order with none.
	ProblemClosedTwice = "closed twice"
	// ProblemLate: closed_at more than JudgeConfig.LateBound after the
	// deadline.
	ProblemLate = "late"
	// ProblemStock: a SKU's available + reserved + sold differs from what
	// the load put, reserved differs from the pending orders' quantities,
	// or sold from the paid orders'.
	ProblemStock = "stock"

	// ProblemTimerLost: an acknowledged arm whose timer is not in the
	// database, or a timer still scheduled after its fire_at once the load
	// has settled.
	ProblemTimerLost = "timer lost"
	// ProblemTimerContradicted: a timer's end contradicts an answer: it
	// fired though its cancel was acknowledged, it is cancelled though no
	// cancel can have been written, it fired for another time than the one
	// it was last armed for, it exists though its arm was refused, or no
	// arm of the load named it; or a cancelled timer has timer.fired
	// events.
	ProblemTimerContradicted = "timer contradicted"
	// ProblemTimerEarly: fired_at before the timer's fire_at.
	ProblemTimerEarly = "timer early"
	// ProblemTimerTwice: a fired timer with other than one timer.fired
	// event (two are allowed when a re-arm was answered after its first
	// fire time: it may have fired then, and again at its new time).
	ProblemTimerTwice = "timer fired twice"
	// ProblemTimerLate: fired_at more than JudgeConfig.LateBound after
	// the timer's fire_at.
	ProblemTimerLate = "timer late"
)

// problemKinds orders the kinds in a report; timerProblemKinds follow when
// the load armed timers.
var (
	problemKinds = []string{ProblemLost, ProblemDuplicated, ProblemPaidAndClosed, ProblemContradicted,
		ProblemEarly, ProblemClosedTwice, ProblemLate, ProblemStock}
	timerProblemKinds = []string{ProblemTimerLost, ProblemTimerContradicted, ProblemTimerEarly, ProblemTimerTwice, ProblemTimerLate}
)

// JudgeConfig is the input of Judge.
type JudgeConfig struct {
	// DatabaseURL is the cluster's database, opened through package store.
	DatabaseURL string
	// Ledger is what the load sent and was told (Load.Stop).
	Ledger *Ledger
	// LateBound is the most a close may lag its deadline, and a timer's
	// fire its fire_at; 0: no bound.
	LateBound time.Duration
	// RequestTimeout is the load's (LoadConfig.RequestTimeout), to bound
	// the deadlines of creates that got no answer.
	RequestTimeout time.Duration
	// SettleTimeout is how long Judge waits, after the last deadline (or
	// fire time) plus LateBound, for the orders still pending to close
	// before it calls them lost, and as long for the timers still
	// scheduled to fire (default 10 s each).
	SettleTimeout time.Duration
	// Logger receives the store's logs; nil discards them.
	Logger *slog.Logger
}

// Close is one closed order, for checks of its lateness by partition.
type Close struct {
	OrderID   int64
	Partition int
	Deadline  time.Time
	ClosedAt  time.Time
}

// Lateness is closed_at − deadline.
func (c Close) Lateness() time.Duration { return c.ClosedAt.Sub(c.Deadline) }

// Fire is one fired timer, for checks of its lateness by partition.
type Fire struct {
	TimerID   int64
	Key       string
	Partition int
	FireAt    time.Time
	FiredAt   time.Time
}

// Lateness is fired_at − fire_at.
func (f Fire) Lateness() time.Duration { return f.FiredAt.Sub(f.FireAt) }

// Verdict is what Judge found in the database. OK reports whether it holds
// no problem; Report prints it. The timer fields are zero when the load
// armed no timers.
type Verdict struct {
	Orders                                int            // orders in the database
	Statuses                              map[string]int // orders by status
	Requests                              map[string]int // the ledger's Counts
	UnknownCreated                        int            // creates without an answer whose order exists
	UnknownAbsent                         int            // … and whose order does not
	Closes                                []Close        // every closed order, by id
	Problems                              map[string][]string
	LateBound                             time.Duration
	LatenessP50, LatenessP99, LatenessMax time.Duration

	Timers         int            // timers in the database
	TimerStatuses  map[string]int // timers by status
	UnknownArmed   int            // arms without an answer whose timer exists
	UnknownUnarmed int            // … and whose timer does not
	// TimersFiredAtBoth counts timers that fired at their first time and
	// again at their new one, a re-arm having been answered after the
	// first (allowed: the re-arm may have come after the fire).
	TimersFiredAtBoth                                    int
	Fires                                                []Fire // every fired timer of the load, in arming order
	TimerLatenessP50, TimerLatenessP99, TimerLatenessMax time.Duration
	// Events holds the events of every order and timer, by id, as the
	// database had them when judged.
	Events map[int64][]hourglass.EventRecord

	timers bool // the load armed timers: report them
}

// OK reports whether the verdict found no problem.
func (v *Verdict) OK() bool { return len(v.Problems) == 0 }

func (v *Verdict) problem(kind, format string, args ...any) {
	if v.Problems == nil {
		v.Problems = map[string][]string{}
	}
	v.Problems[kind] = append(v.Problems[kind], fmt.Sprintf(format, args...))
}

// MaxLateness returns the largest lateness among the closes that keep
// holds, and how many it held.
func (v *Verdict) MaxLateness(keep func(Close) bool) (max time.Duration, n int) {
	for _, c := range v.Closes {
		if keep(c) {
			n++
			max = maxDur(max, c.Lateness())
		}
	}
	return max, n
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// Report returns the verdict as lines of text: the counts, the lateness,
// and every kind of problem with its count and up to perKind examples.
func (v *Verdict) Report(perKind int) string {
	var b strings.Builder
	verdict := "OK"
	if !v.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "verdict: %s\n", verdict)
	fmt.Fprintf(&b, "  orders in the database: %d %v\n", v.Orders, v.Statuses)
	fmt.Fprintf(&b, "  requests: %v; unanswered creates: %d made an order, %d did not\n", v.Requests, v.UnknownCreated, v.UnknownAbsent)
	fmt.Fprintf(&b, "  close lateness (closed_at - deadline): p50 %s, p99 %s, max %s", v.LatenessP50, v.LatenessP99, v.LatenessMax)
	if v.LateBound > 0 {
		fmt.Fprintf(&b, " (bound %s)", v.LateBound)
	}
	b.WriteByte('\n')
	kinds := problemKinds
	if v.timers {
		kinds = slices.Concat(kinds, timerProblemKinds)
		fmt.Fprintf(&b, "  timers in the database: %d %v; unanswered arms: %d made a timer, %d did not; fired at both times of a late re-arm: %d\n",
			v.Timers, v.TimerStatuses, v.UnknownArmed, v.UnknownUnarmed, v.TimersFiredAtBoth)
		fmt.Fprintf(&b, "  timer lateness (fired_at - fire_at): p50 %s, p99 %s, max %s", v.TimerLatenessP50, v.TimerLatenessP99, v.TimerLatenessMax)
		if v.LateBound > 0 {
			fmt.Fprintf(&b, " (bound %s)", v.LateBound)
		}
		b.WriteByte('\n')
	}
	for _, kind := range kinds {
		ps := v.Problems[kind]
		fmt.Fprintf(&b, "  %-16s %d\n", kind+":", len(ps))
		for i, p := range ps {
			if i == perKind {
				fmt.Fprintf(&b, "      … and %d more\n", len(ps)-perKind)
				break
			}
			fmt.Fprintf(&b, "      %s\n", p)
		}
	}
	return b.String()
}

// Judge waits for the load's orders and timers to settle (every deadline
// and fire time passed, plus LateBound, then until no order is pending past
// its deadline and no timer scheduled past its fire time, or SettleTimeout
// passes), reads every order, timer, their events and the products from
// the database, and checks them against the ledger. It returns an
// error only when the database cannot be read; what it finds wrong is in
// the Verdict.
func Judge(ctx context.Context, cfg JudgeConfig) (*Verdict, error) {
	cfg.SettleTimeout = cmp.Or(cfg.SettleTimeout, 10*time.Second)
	db, err := store.Open(ctx, store.Options{URL: cfg.DatabaseURL, Logger: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)), MaxConns: 8})
	if err != nil {
		return nil, fmt.Errorf("nodes: judge: open the database: %w", err)
	}
	defer db.Close()

	last := cfg.Ledger.LastDeadline(cmp.Or(cfg.RequestTimeout, LoadRequestTimeoutDefault))
	if t := cfg.Ledger.LastFireAt(); t.After(last) {
		last = t
	}
	wait := time.Until(last.Add(cfg.LateBound))
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(wait):
	}
	orders, err := settle(ctx, db, cfg.SettleTimeout)
	if err != nil {
		return nil, err
	}

	var timers []hourglass.Timer
	if len(cfg.Ledger.Timers) > 0 {
		if timers, err = settleTimers(ctx, db, cfg.SettleTimeout); err != nil {
			return nil, err
		}
	}

	v := &Verdict{Orders: len(orders), Statuses: map[string]int{}, Requests: cfg.Ledger.Counts(), LateBound: cfg.LateBound, timers: len(cfg.Ledger.Timers) > 0}
	ids := make([]int64, 0, len(orders)+len(timers))
	for _, o := range orders {
		ids = append(ids, o.ID)
	}
	for _, tm := range timers {
		ids = append(ids, tm.ID)
	}
	events, err := readEvents(ctx, db, ids)
	if err != nil {
		return nil, err
	}
	v.Events = events
	if v.timers {
		judgeTimers(cfg.Ledger.Timers, timers, events, cfg.LateBound, v)
	}
	byUser := map[string][]hourglass.Order{}
	for _, o := range orders {
		byUser[o.UserID] = append(byUser[o.UserID], o)
	}
	asked := map[string]bool{}
	now := time.Now()
	for _, c := range cfg.Ledger.Creates {
		asked[c.UserID] = true
		found := byUser[c.UserID]
		if len(found) > 1 {
			ids := make([]int64, len(found))
			for i, o := range found {
				ids[i] = o.ID
			}
			v.problem(ProblemDuplicated, "create %s (attempts %v) made orders %v", c.UserID, c.Attempts, ids)
		}
		switch c.Outcome {
		case Acknowledged:
			if len(found) == 0 {
				v.problem(ProblemLost, "order %d (%s) was acknowledged but is not in the database", c.Order.ID, c.UserID)
				continue
			}
			if found[0].ID != c.Order.ID {
				v.problem(ProblemContradicted, "create %s was acknowledged as order %d, the database has %d", c.UserID, c.Order.ID, found[0].ID)
			}
		case Refused:
			if len(found) > 0 {
				v.problem(ProblemContradicted, "create %s was refused (%v) but order %d exists", c.UserID, c.Attempts, found[0].ID)
			}
			continue
		default:
			if len(found) == 0 {
				v.UnknownAbsent++
				continue
			}
			v.UnknownCreated++
		}
		o := found[0]
		if !slices.Equal(itemsOf(o), c.Items) {
			v.problem(ProblemContradicted, "order %d (%s) has items %v, the create sent %v", o.ID, c.UserID, o.Items, c.Items)
		}
		// What the order must have ended as, given the pay's answers.
		want := map[hourglass.State]bool{hourglass.StateClosed: true}
		if c.Pay != nil {
			switch c.Pay.Outcome {
			case Acknowledged:
				want = map[hourglass.State]bool{hourglass.StatePaid: true}
			case Unknown:
				want[hourglass.StatePaid] = true
			}
		}
		if o.Status != hourglass.StatePendingPayment && !want[o.Status] {
			pay := "no pay"
			if c.Pay != nil {
				pay = fmt.Sprintf("pay %s %v", c.Pay.Outcome, c.Pay.Attempts)
			}
			v.problem(ProblemContradicted, "order %d (%s, %s): status %s", o.ID, c.UserID, pay, o.Status)
		}
		if o.Status == hourglass.StatePaid && o.PaymentID != c.Pay.PaymentID {
			v.problem(ProblemContradicted, "order %d: paid with payment id %q, the load sent %q", o.ID, o.PaymentID, c.Pay.PaymentID)
		}
	}

	var lateness []time.Duration
	for _, o := range orders {
		v.Statuses[string(o.Status)]++
		if !asked[o.UserID] {
			v.problem(ProblemDuplicated, "order %d (%s) matches no create request of the load", o.ID, o.UserID)
		}
		evs := events[o.ID]
		closedEvents, paidEvents := count(evs, hourglass.EventOrderClosed), count(evs, hourglass.EventOrderPaid)
		if o.Status == hourglass.StatePaid && (closedEvents > 0 || !o.ClosedAt.IsZero()) ||
			o.Status == hourglass.StateClosed && (paidEvents > 0 || !o.PaidAt.IsZero()) {
			v.problem(ProblemPaidAndClosed, "order %d: status %s, paid_at %s, closed_at %s, events %v", o.ID, o.Status, fmtTime(o.PaidAt), fmtTime(o.ClosedAt), types(evs))
		}
		switch o.Status {
		case hourglass.StatePendingPayment:
			if !o.Deadline.After(now) {
				v.problem(ProblemLost, "order %d (%s) is still pending, %s after its deadline %s", o.ID, o.UserID, now.Sub(o.Deadline).Round(time.Millisecond), fmtTime(o.Deadline))
			}
		case hourglass.StatePaid:
			if !o.PaidAt.Before(o.Deadline) {
				v.problem(ProblemContradicted, "order %d paid at %s, not before its deadline %s", o.ID, fmtTime(o.PaidAt), fmtTime(o.Deadline))
			}
		case hourglass.StateClosed:
			if closedEvents != 1 {
				v.problem(ProblemClosedTwice, "order %d has %d order.closed events: %v", o.ID, closedEvents, types(evs))
			}
			if o.ClosedAt.IsZero() {
				v.problem(ProblemLost, "order %d is closed without closed_at", o.ID)
				continue
			}
			c := Close{OrderID: o.ID, Partition: hourglass.PartitionOf(o.ID), Deadline: o.Deadline, ClosedAt: o.ClosedAt}
			v.Closes = append(v.Closes, c)
			lateness = append(lateness, c.Lateness())
			if c.ClosedAt.Before(c.Deadline) {
				v.problem(ProblemEarly, "order %d closed at %s, %s before its deadline %s", o.ID, fmtTime(o.ClosedAt), -c.Lateness(), fmtTime(o.Deadline))
			}
			if cfg.LateBound > 0 && c.Lateness() > cfg.LateBound {
				v.problem(ProblemLate, "order %d (partition %d) closed at %s, %s after its deadline %s", o.ID, c.Partition, fmtTime(o.ClosedAt), c.Lateness(), fmtTime(o.Deadline))
			}
		}
	}
	if len(lateness) > 0 {
		slices.Sort(lateness)
		v.LatenessP50 = lateness[len(lateness)/2]
		v.LatenessP99 = lateness[len(lateness)*99/100]
		v.LatenessMax = lateness[len(lateness)-1]
	}
	if err := checkStock(ctx, db, cfg.Ledger.Stock, orders, v); err != nil {
		return nil, err
	}
	return v, nil
}

// settle pages through every order until none is pending past its
// deadline, or timeout passes, and returns them all. Orders in a final
// state are not read again (the load has stopped: nothing changes them).
func settle(ctx context.Context, db hourglass.Database, timeout time.Duration) ([]hourglass.Order, error) {
	var final []hourglass.Order // every order below the first still open, in id order
	giveUp := time.Now().Add(timeout)
	for {
		var after int64
		if len(final) > 0 {
			after = final[len(final)-1].ID
		}
		var rest []hourglass.Order
		for {
			page, err := db.ListOrders(ctx, hourglass.OrderFilter{After: after, Limit: 1000, Now: time.Now()})
			if err != nil {
				return nil, fmt.Errorf("nodes: judge: list orders: %w", err)
			}
			rest = append(rest, page...)
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].ID
		}
		now := time.Now()
		open := slices.IndexFunc(rest, func(o hourglass.Order) bool {
			return o.Status == hourglass.StatePendingPayment && !o.Deadline.After(now) ||
				o.Status == hourglass.StateClosed && o.ClosedAt.IsZero()
		})
		if open < 0 || time.Now().After(giveUp) {
			return append(final, rest...), nil
		}
		final = append(final, rest[:open]...)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// readEvents returns the events of every order or timer id, read 8 at a
// time.
func readEvents(ctx context.Context, db hourglass.Database, ids []int64) (map[int64][]hourglass.EventRecord, error) {
	out := make(map[int64][]hourglass.EventRecord, len(ids))
	var mu sync.Mutex
	var firstErr error
	queue := make(chan int64)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for id := range queue {
				evs, err := db.OrderEvents(ctx, id)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("nodes: judge: events of %d: %w", id, err)
				}
				out[id] = evs
				mu.Unlock()
			}
		})
	}
	for _, id := range ids {
		queue <- id
	}
	close(queue)
	wg.Wait()
	return out, firstErr
}

// checkStock checks every SKU the load put against the orders.
func checkStock(ctx context.Context, db hourglass.Database, stock map[string]int64, orders []hourglass.Order, v *Verdict) error {
	reserved, sold := map[string]int64{}, map[string]int64{}
	for _, o := range orders {
		for _, it := range o.Items {
			switch o.Status {
			case hourglass.StatePendingPayment:
				reserved[it.SKU] += it.Quantity
			case hourglass.StatePaid, hourglass.StateShipped, hourglass.StateCompleted:
				sold[it.SKU] += it.Quantity
			}
		}
	}
	skus := make([]string, 0, len(stock))
	for sku := range stock {
		skus = append(skus, sku)
	}
	sort.Strings(skus)
	for _, sku := range skus {
		p, err := db.Product(ctx, sku)
		if err != nil {
			return fmt.Errorf("nodes: judge: product %s: %w", sku, err)
		}
		if total := p.Available + p.Reserved + p.Sold; total != stock[sku] {
			v.problem(ProblemStock, "%s: available %d + reserved %d + sold %d = %d, the load put %d", sku, p.Available, p.Reserved, p.Sold, total, stock[sku])
		}
		if p.Reserved != reserved[sku] {
			v.problem(ProblemStock, "%s: reserved %d, the pending orders hold %d", sku, p.Reserved, reserved[sku])
		}
		if p.Sold != sold[sku] {
			v.problem(ProblemStock, "%s: sold %d, the paid orders hold %d", sku, p.Sold, sold[sku])
		}
	}
	return nil
}

func itemsOf(o hourglass.Order) []api.ItemJSON {
	out := make([]api.ItemJSON, len(o.Items))
	for i, it := range o.Items {
		out[i] = api.ItemJSON{SKU: it.SKU, Quantity: it.Quantity}
	}
	return out
}

func count(evs []hourglass.EventRecord, t hourglass.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == t {
			n++
		}
	}
	return n
}

func types(evs []hourglass.EventRecord) []hourglass.EventType {
	out := make([]hourglass.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "null"
	}
	return t.UTC().Format("15:04:05.000")
}
