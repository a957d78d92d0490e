package plan

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func TestExtend(t *testing.T) {
	t.Parallel()
	created := now.Add(-time.Minute)
	pending := hourglass.Order{ID: 7, Status: hourglass.StatePendingPayment, CreatedAt: created, Deadline: now.Add(time.Second)}
	overdue := pending
	overdue.Deadline = now.Add(-time.Second)
	paid := pending
	paid.Status, paid.PaidAt, paid.PaymentID = hourglass.StatePaid, now, "p"
	at := func(d time.Duration) hourglass.ExtendOrderParams {
		return hourglass.ExtendOrderParams{ID: 7, Deadline: now.Add(d)}
	}
	by := func(d time.Duration) hourglass.ExtendOrderParams { return hourglass.ExtendOrderParams{ID: 7, By: d} }
	late := func(p hourglass.ExtendOrderParams) hourglass.ExtendOrderParams { p.Overdue = true; return p }
	for _, tt := range []struct {
		name   string
		cur    *hourglass.Order
		p      hourglass.ExtendOrderParams
		want   string // "extend", "repeat" or an error code
		target time.Duration
	}{
		{"to a later time", &pending, at(time.Minute), "extend", time.Minute},
		{"by an amount", &pending, by(time.Minute), "extend", time.Minute + time.Second},
		{"repeat of the same deadline", &pending, at(time.Second), "repeat", time.Second},
		{"earlier", &pending, at(time.Millisecond), string(hourglass.CodeInvalidArgument), 0},
		{"exactly 7 days after creation", &pending, hourglass.ExtendOrderParams{ID: 7, Deadline: created.Add(hourglass.MaxOrderLifetime)}, "extend", hourglass.MaxOrderLifetime - time.Minute},
		{"past 7 days after creation", &pending, hourglass.ExtendOrderParams{ID: 7, Deadline: created.Add(hourglass.MaxOrderLifetime + time.Millisecond)}, string(hourglass.CodeInvalidArgument), 0},
		{"unknown order", nil, at(time.Minute), string(hourglass.CodeNotFound), 0},
		{"paid", &paid, at(time.Minute), string(hourglass.CodeInvalidTransition), 0},
		{"deadline passed", &overdue, at(time.Minute), string(hourglass.CodeInvalidTransition), 0},
		{"deadline passed, by the check", &overdue, late(at(time.Minute)), "extend", time.Minute},
		{"by the check, not in the future", &overdue, late(at(0)), string(hourglass.CodeInvalidArgument), 0},
		{"paid, by the check", &paid, late(at(time.Minute)), string(hourglass.CodeInvalidTransition), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			extend, repeat, target, err := Extend(tt.cur, tt.p, now)
			got := string(hourglass.ErrorCode(err))
			switch {
			case err != nil:
			case extend && !repeat:
				got = "extend"
			case repeat && !extend:
				got = "repeat"
			default:
				t.Fatalf("extend=%v repeat=%v err=nil", extend, repeat)
			}
			if got != tt.want {
				t.Fatalf("Extend = %s (%v), want %s", got, err, tt.want)
			}
			if err == nil && !target.Equal(now.Add(tt.target)) {
				t.Fatalf("target %v, want %v", target, now.Add(tt.target))
			}
		})
	}
}

func TestPayDue(t *testing.T) {
	t.Parallel()
	overdue := hourglass.Order{ID: 7, Status: hourglass.StatePendingPayment, Deadline: now.Add(-time.Hour)}
	paid := hourglass.Order{ID: 7, Status: hourglass.StatePaid, PaidAt: now, PaymentID: "p"}
	closed := hourglass.Order{ID: 7, Status: hourglass.StateClosed}
	for _, tt := range []struct {
		name string
		cur  *hourglass.Order
		want string
	}{
		{"pending past its deadline", &overdue, "pay"},
		{"repeat", &paid, "repeat"},
		{"paid with another id", &hourglass.Order{ID: 7, Status: hourglass.StatePaid, PaidAt: now, PaymentID: "q"}, string(hourglass.CodeOrderNotPayable)},
		{"closed", &closed, string(hourglass.CodeOrderNotPayable)},
		{"unknown", nil, string(hourglass.CodeNotFound)},
	} {
		pay, repeat, err := PayDue(tt.cur, 7, "p")
		got := string(hourglass.ErrorCode(err))
		if pay {
			got = "pay"
		} else if repeat {
			got = "repeat"
		}
		if got != tt.want {
			t.Errorf("%s: PayDue = %s (%v), want %s", tt.name, got, err, tt.want)
		}
	}
}
