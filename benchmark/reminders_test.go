package benchmark

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func TestCheckReminders(t *testing.T) {
	t.Parallel()
	const lead = 2 * time.Second
	created := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	deadline := created.Add(4 * time.Second)
	remindAt := deadline.Add(-lead)
	ms := func(d int) time.Time { return remindAt.Add(time.Duration(d) * time.Millisecond) }
	closed := func(id int64) hourglass.Order {
		return hourglass.Order{ID: id, Status: hourglass.StateClosed, CreatedAt: created, Deadline: deadline, ClosedAt: deadline.Add(time.Millisecond)}
	}
	paid := func(id int64, at time.Time) hourglass.Order {
		return hourglass.Order{ID: id, Status: hourglass.StatePaid, CreatedAt: created, Deadline: deadline, PaidAt: at}
	}
	for _, tc := range []struct {
		name     string
		order    hourglass.Order
		expiring []time.Time
		want     func(r ReminderResult) bool
		violates string // "" for none
	}{
		{"sent on time", closed(1), []time.Time{ms(3)}, func(r ReminderResult) bool { return r.Owed == 1 && r.Sent == 1 && r.Lateness.Max == 3 }, ""},
		{"sent at remind_at", closed(1), []time.Time{ms(0)}, func(r ReminderResult) bool { return r.Sent == 1 && r.Lateness.Max == 0 }, ""},
		{"early", closed(1), []time.Time{ms(-1)}, func(r ReminderResult) bool { return r.Early == 1 }, "before its remind_at"},
		{"twice", closed(1), []time.Time{ms(1), ms(2)}, func(r ReminderResult) bool { return r.Twice == 1 }, "2 order.expiring"},
		{"missing", closed(1), nil, func(r ReminderResult) bool { return r.Missing == 1 }, "without its reminder"},
		{"paid before remind_at, none", paid(1, ms(-500)), nil, func(r ReminderResult) bool { return r.Owed == 0 && r.Sent == 0 }, ""},
		{"paid before remind_at, sent", paid(1, ms(-500)), []time.Time{ms(1)}, func(r ReminderResult) bool { return r.SentPaidBefore == 1 }, "paid at"},
		{"paid after, sent before it", paid(1, ms(10)), []time.Time{ms(2)}, func(r ReminderResult) bool { return r.Owed == 1 && r.Sent == 1 }, ""},
		{"paid in the reminder's millisecond", paid(1, ms(2)), []time.Time{ms(2)}, func(r ReminderResult) bool { return r.Sent == 1 }, ""},
		{"paid after remind_at, before a late reminder", paid(1, ms(10)), nil, func(r ReminderResult) bool { return r.PaidFirst == 1 && r.Missing == 0 }, ""},
		{"sent after the pay", paid(1, ms(10)), []time.Time{ms(11)}, func(r ReminderResult) bool { return r.SentAfterEnd == 1 }, "after its end"},
		{"sent at the deadline", closed(1), []time.Time{deadline}, func(r ReminderResult) bool { return r.SentAfterEnd == 1 }, "after its end"},
		{"lead as long as the timeout", hourglass.Order{ID: 1, Status: hourglass.StateClosed, CreatedAt: remindAt, Deadline: deadline, ClosedAt: deadline},
			nil, func(r ReminderResult) bool { return r.Owed == 0 && r.Missing == 0 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, violations := CheckReminders(lead, []hourglass.Order{tc.order}, map[int64][]time.Time{tc.order.ID: tc.expiring})
			if !tc.want(r) {
				t.Errorf("result %+v", r)
			}
			switch {
			case tc.violates == "" && len(violations) > 0:
				t.Errorf("violations %q, want none", violations)
			case tc.violates != "" && (len(violations) == 0 || !strings.Contains(strings.Join(violations, "\n"), tc.violates)):
				t.Errorf("violations %q, want one saying %q", violations, tc.violates)
			}
		})
	}
}

func TestWorkloadRemindBefore(t *testing.T) {
	t.Parallel()
	base := Workload{Rate: 100, Duration: time.Second, Timeouts: Timeouts{Min: 4 * time.Second, Max: 4 * time.Second}, Grace: time.Second}
	for _, tc := range []struct {
		lead time.Duration
		ok   bool
	}{{0, true}, {2 * time.Second, true}, {4 * time.Second, false}, {-time.Second, false}, {500 * time.Millisecond, false}, {1500*time.Millisecond + time.Microsecond, false}} {
		w := base
		w.RemindBefore = tc.lead
		if err := w.Validate(); (err == nil) != tc.ok {
			t.Errorf("--remind-before %s: Validate() = %v, want ok %v", tc.lead, err, tc.ok)
		}
	}
}
