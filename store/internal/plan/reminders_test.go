package plan

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func TestReminds(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	order := func(status hourglass.State, remind time.Duration) *hourglass.Order {
		o := &hourglass.Order{Status: status, CreatedAt: t0, Deadline: at(30 * time.Second), RemindBefore: 10 * time.Second}
		if remind != 0 {
			o.RemindAt = at(remind)
		}
		return o
	}
	for _, tt := range []struct {
		name       string
		cur        *hourglass.Order
		now        time.Duration
		send, skip bool
	}{
		{"no order", nil, 20 * time.Second, false, false},
		{"no reminder (none, or settled)", order(hourglass.StatePendingPayment, 0), 20 * time.Second, false, false},
		{"a millisecond early", order(hourglass.StatePendingPayment, 20*time.Second), 20*time.Second - time.Millisecond, false, false},
		{"at remind_at", order(hourglass.StatePendingPayment, 20*time.Second), 20 * time.Second, true, false},
		{"late, before the deadline", order(hourglass.StatePendingPayment, 20*time.Second), 30*time.Second - time.Millisecond, true, false},
		{"at the deadline", order(hourglass.StatePendingPayment, 20*time.Second), 30 * time.Second, false, true},
		{"paid first", order(hourglass.StatePaid, 20*time.Second), 20 * time.Second, false, true},
		{"cancelled first", order(hourglass.StateCancelled, 20*time.Second), 20 * time.Second, false, true},
		{"closed first", order(hourglass.StateClosed, 20*time.Second), 40 * time.Second, false, true},
		{"paid, not yet due", order(hourglass.StatePaid, 20*time.Second), 10 * time.Second, false, false},
	} {
		send, skip := Reminds(tt.cur, at(tt.now))
		if send != tt.send || skip != tt.skip {
			t.Errorf("%s: Reminds = send %v, skip %v; want %v, %v", tt.name, send, skip, tt.send, tt.skip)
		}
	}
}

func TestRearm(t *testing.T) {
	t.Parallel()
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, tt := range []struct {
		name     string
		lead     time.Duration
		deadline time.Duration
		now      time.Duration
		want     time.Duration // 0: none
	}{
		{"extended before the reminder", 10 * time.Second, 60 * time.Second, 5 * time.Second, 50 * time.Second},
		{"extended after it, new time ahead", 10 * time.Second, 90 * time.Second, 25 * time.Second, 80 * time.Second},
		{"extended after it, new time passed", 10 * time.Second, 32 * time.Second, 25 * time.Second, 0},
		{"new time is now", 10 * time.Second, 35 * time.Second, 25 * time.Second, 0},
		{"no lead", 0, 60 * time.Second, 5 * time.Second, 0},
	} {
		o := hourglass.Order{CreatedAt: t0, Deadline: at(tt.deadline), RemindBefore: tt.lead}
		var want time.Time
		if tt.want != 0 {
			want = at(tt.want)
		}
		if got := Rearm(o, at(tt.now)); !got.Equal(want) {
			t.Errorf("%s: Rearm = %v, want %v", tt.name, got, want)
		}
	}
}
