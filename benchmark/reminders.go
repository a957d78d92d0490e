package benchmark

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hourglass/hourglass"
)

// ReminderResult is what a run with a reminder lead (Workload.RemindBefore,
// `hourglass bench --remind-before`) measured of the orders' order.expiring
// events (issue #41), read back black-box from each order's history.
type ReminderResult struct {
	// Lead is the reminder lead every order was created with.
	Lead string `json:"lead"`
	// Owed is how many orders were still pending at their remind_at
	// (deadline − lead): never paid, or paid after it.
	Owed int `json:"owed"`
	// Sent is how many orders got an order.expiring.
	Sent int `json:"sent"`
	// Lateness is the event's created_at − remind_at over every reminder
	// sent.
	Lateness Summary `json:"lateness"`
	// Early: sent before remind_at (must be 0).
	Early int `json:"early"`
	// SentPaidBefore: sent for an order paid before its remind_at (must be
	// 0).
	SentPaidBefore int `json:"sent_paid_before"`
	// SentAfterEnd: sent after the order was paid or closed, or at or
	// after its deadline (must be 0).
	SentAfterEnd int `json:"sent_after_end"`
	// Twice: orders with more than one order.expiring (one deadline each:
	// must be 0).
	Twice int `json:"twice"`
	// Missing: orders never paid (closed at their deadline) without a
	// reminder (must be 0).
	Missing int `json:"missing"`
	// PaidFirst: orders paid after remind_at but before their reminder was
	// sent, so rightly without one.
	PaidFirst int `json:"paid_first"`
	lateness  []time.Duration
}

// readExpiring reads the order.expiring events of every order of final
// from target, with a few readers at once.
func readExpiring(ctx context.Context, target Target, final []hourglass.Order) (map[int64][]time.Time, error) {
	const readers = 16
	var (
		mu       sync.Mutex
		out      = make(map[int64][]time.Time, len(final))
		next     atomic.Int64
		firstErr error
		wg       sync.WaitGroup
	)
	for range readers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(final); i = int(next.Add(1) - 1) {
				id := final[i].ID
				at, err := target.Expiring(ctx, id)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("read the history of order %d: %w", id, err)
				}
				out[id] = at
				failed := firstErr != nil
				mu.Unlock()
				if failed {
					return
				}
			}
		})
	}
	wg.Wait()
	return out, firstErr
}

// CheckReminders checks the reminders of final (the run's orders as
// stored at the end, each created with the reminder lead and never
// extended) against expiring (the created_at of each order's
// order.expiring events) and returns the figures and what broke a promise
// of issue #41: none early, none for an order paid before remind_at, none
// once the order was paid or closed or at its deadline, at most one per
// order, and one for every order never paid.
func CheckReminders(lead time.Duration, final []hourglass.Order, expiring map[int64][]time.Time) (ReminderResult, []string) {
	r := ReminderResult{Lead: lead.String()}
	var violations []string
	violate := func(format string, args ...any) {
		if len(violations) < 20 { // enough to see the pattern
			violations = append(violations, fmt.Sprintf(format, args...))
		}
	}
	for _, o := range final {
		remindAt := hourglass.RemindAt(o.CreatedAt, o.Deadline, lead)
		if remindAt.IsZero() {
			continue // a lead as long as the timeout: no reminder
		}
		sent := expiring[o.ID]
		paidBefore := !o.PaidAt.IsZero() && o.PaidAt.Before(remindAt)
		if !paidBefore {
			r.Owed++
		}
		switch {
		case len(sent) > 1:
			r.Twice++
			violate("order %d: %d order.expiring events, want at most 1", o.ID, len(sent))
		case len(sent) == 0 && o.Status == hourglass.StateClosed && o.PaidAt.IsZero():
			r.Missing++
			violate("order %d: closed unpaid at %s without its reminder due at %s", o.ID, o.ClosedAt.Format(time.StampMilli), remindAt.Format(time.StampMilli))
		case len(sent) == 0 && !o.PaidAt.IsZero() && !paidBefore:
			r.PaidFirst++
		}
		if len(sent) > 0 {
			r.Sent++
		}
		for _, at := range sent {
			late := at.Sub(remindAt)
			r.lateness = append(r.lateness, late)
			if late < 0 {
				r.Early++
				violate("order %d: order.expiring at %s, %s before its remind_at", o.ID, at.Format(time.StampMilli), -late)
			}
			if paidBefore {
				r.SentPaidBefore++
				violate("order %d: order.expiring at %s for an order paid at %s, before its remind_at %s", o.ID,
					at.Format(time.StampMilli), o.PaidAt.Format(time.StampMilli), remindAt.Format(time.StampMilli))
			}
			// The event and a pay or close in the same millisecond are
			// in either order; the reminder before the close's deadline.
			if !o.PaidAt.IsZero() && at.After(o.PaidAt) || !o.ClosedAt.IsZero() && at.After(o.ClosedAt) || !at.Before(o.Deadline) {
				r.SentAfterEnd++
				violate("order %d (%s): order.expiring at %s, after its end (paid %s, closed %s, deadline %s)", o.ID, o.Status,
					at.Format(time.StampMilli), o.PaidAt.Format(time.StampMilli), o.ClosedAt.Format(time.StampMilli), o.Deadline.Format(time.StampMilli))
			}
		}
	}
	r.Lateness = Summarize(r.lateness)
	return r, violations
}

// WriteReminderTable prints the reminder figures of the results that have
// them, beside their closes' lateness in the same run.
func (r *Report) WriteReminderTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tlead\towed\tsent\tremind p50\tp99\tmax\tclose p50\tp99\tmax\tearly\tpaid before, sent\tafter end\ttwice\tmissing\tpaid first\t")
	for _, res := range r.Results {
		m := res.Reminders
		if res.Error != "" || m == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0fms\t%.0fms\t%.0fms\t%.0fms\t%.0fms\t%.0fms\t%d\t%d\t%d\t%d\t%d\t%d\t\n",
			res.System, m.Lead, m.Owed, m.Sent, m.Lateness.P50, m.Lateness.P99, m.Lateness.Max,
			res.Lateness.P50, res.Lateness.P99, res.Lateness.Max, m.Early, m.SentPaidBefore, m.SentAfterEnd, m.Twice, m.Missing, m.PaidFirst)
	}
	tw.Flush()
	fmt.Fprintln(w, "reminders: remind = order.expiring's created_at − remind_at (deadline − lead), close = closed_at − deadline, in whole ms; owed = orders pending at")
	fmt.Fprintln(w, "remind_at; early, paid before (sent for an order paid before remind_at), after end (sent once paid or closed), twice and missing must be 0;")
	fmt.Fprintln(w, "paid first = paid after remind_at but before its reminder was sent, so rightly none.")
}

func hasReminders(results []Result) bool {
	for _, r := range results {
		if r.Reminders != nil {
			return true
		}
	}
	return false
}
