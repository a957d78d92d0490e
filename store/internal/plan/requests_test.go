package plan

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func ptr[T any](v T) *T { return &v }

func armRow(seq int64, key string, delayMs int64) RequestRow {
	return RequestRow{TimerRequest: hourglass.TimerRequest{Seq: seq, Key: ptr(key), Action: hourglass.TimerRequestArm, DelayMs: ptr(delayMs), RequestedAt: now.Add(-time.Second)}}
}

func cancelRow(seq int64, key string) RequestRow {
	return RequestRow{TimerRequest: hourglass.TimerRequest{Seq: seq, Key: ptr(key), Action: hourglass.TimerRequestCancel, RequestedAt: now.Add(-time.Second)}}
}

// TestPlanTimerRequests: what each request of a batch becomes before it
// runs: held, rejected with its reason, or an arm or a cancel in its
// key's round.
func TestPlanTimerRequests(t *testing.T) {
	t.Parallel()
	zero := armRow(9, "z", 1)
	zero.Unreadable = "requested_at: not a valid time (a zero date)"
	rows := []RequestRow{
		armRow(1, "a", 1000),
		cancelRow(2, "a"),
		armRow(3, "held", 1000),
		{TimerRequest: hourglass.TimerRequest{Seq: 4, Key: ptr("a"), Action: "snooze"}},
		armRow(5, "a", 2000),
		{TimerRequest: hourglass.TimerRequest{Seq: 6, Action: hourglass.TimerRequestArm, DelayMs: ptr(int64(1))}},
		armRow(7, "b", -5),
		cancelRow(8, "b"),
		zero,
	}
	p := PlanTimerRequests(rows, map[string]bool{"held": true}, now, Facts{Room: hourglass.NoTimerLimit})
	type want struct {
		kind   string // "arm", "cancel", "held" or "rejected"
		round  int
		reason string // for "rejected": a part of the reason
	}
	wants := []want{
		{"arm", 0, ""}, {"cancel", 1, ""}, {"held", 0, ""}, {"rejected", 0, `action: must be "arm" or "cancel", got "snooze"`},
		{"arm", 2, ""}, {"rejected", 0, "timer_key"}, {"rejected", 0, "delay_ms"}, {"cancel", 0, ""},
		{"rejected", 0, "a zero date"},
	}
	if len(p) != len(wants) {
		t.Fatalf("planned %d requests, want %d", len(p), len(wants))
	}
	for i, w := range wants {
		r := p[i]
		var kind string
		switch {
		case r.Held:
			kind = "held"
		case r.Reason != "":
			kind = "rejected"
		case r.Arm != nil:
			kind = "arm"
		case r.CancelKey != "":
			kind = "cancel"
		}
		if kind != w.kind || r.Round != w.round || !strings.Contains(r.Reason, w.reason) || r.Row.Seq != rows[i].Seq {
			t.Errorf("request %d: %s round %d reason %q; want %s round %d reason containing %q", rows[i].Seq, kind, r.Round, r.Reason, w.kind, w.round, w.reason)
		}
	}
	if r := p[0]; r.Arm.Key != "a" || !r.Arm.FireAt.Equal(now.Add(-time.Second+time.Second)) {
		t.Errorf("arm of a = %+v; want a, fire_at a second after requested_at", r.Arm)
	}
	if got := p.Rounds(); got != 3 {
		t.Errorf("Rounds = %d, want 3 (a's arm, cancel and arm)", got)
	}
	if keys := HeldKeysToRead(rows); !slices.Equal(keys, []string{"a", "held", "b", "z"}) {
		t.Errorf("HeldKeysToRead = %q; want each valid key once", keys)
	}
}

// TestSettleAndResult: what the writes answered decides the rest: a
// refused arm is rejected, a cancel of nothing is applied, a database
// error fails the batch, and each key's last change is what the engine
// hears.
func TestSettleAndResult(t *testing.T) {
	t.Parallel()
	rows := []RequestRow{
		armRow(1, "a", 1000),   // armed, then cancelled by 2
		cancelRow(2, "a"),      // a's end state: cancelled
		armRow(3, "b", 1000),   // refused: its webhook does not exist
		cancelRow(4, "fired"),  // fired already: applied, changes nothing
		cancelRow(5, "nobody"), // no such timer: applied, changes nothing
		armRow(6, "c", 1000),   // c's end state: armed
		armRow(7, "held", 1),
	}
	rows = append(rows, RequestRow{TimerRequest: hourglass.TimerRequest{Seq: 8, Key: ptr("d"), Action: "x"}}) // rejected as planned
	rows[6].RequestedAt = time.Time{}
	p := PlanTimerRequests(rows, map[string]bool{"held": true}, now, Facts{Room: hourglass.NoTimerLimit})
	a := hourglass.Timer{ID: 11, Key: "a", Status: hourglass.TimerScheduled, FireAt: now}
	aCancelled := a
	aCancelled.Status = hourglass.TimerCancelled
	c := hourglass.Timer{ID: 12, Key: "c", Status: hourglass.TimerScheduled, FireAt: now.Add(time.Minute)}
	answers := []struct {
		t   hourglass.Timer
		err error
	}{
		{a, nil},
		{aCancelled, nil},
		{hourglass.Timer{}, hourglass.Errorf(hourglass.CodeInvalidArgument, "webhook_id: webhook 9 not found")},
		{hourglass.Timer{}, hourglass.Errorf(hourglass.CodeTimerFired, "timer fired")},
		{hourglass.Timer{}, hourglass.Errorf(hourglass.CodeNotFound, "timer not found")},
		{c, nil},
	}
	for i, ans := range answers {
		if err := p[i].Settle(ans.t, ans.err); err != nil {
			t.Fatalf("Settle of request %d: %v", i+1, err)
		}
	}
	if p[2].Reason != "webhook_id: webhook 9 not found" || p[2].Runs() {
		t.Errorf("refused arm: reason %q, runs %v; want rejected with the refusal's message", p[2].Reason, p[2].Runs())
	}
	done, rejected := p.Outcome()
	if !slices.Equal(done, []int64{1, 2, 3, 4, 5, 6, 8}) || len(rejected) != 2 || rejected[0].Row.Seq != 3 || rejected[1].Row.Seq != 8 {
		t.Errorf("Outcome = %v, %d rejected; want every seq but the held one done, 3 and 8 rejected", done, len(rejected))
	}
	res := p.Result(now)
	if res.Applied != 5 || res.Rejected != 2 || len(res.Lags) != 7 || res.Lags[0] != time.Second {
		t.Errorf("Result counts = %d applied, %d rejected, lags %v; want 5, 2, seven of a second", res.Applied, res.Rejected, res.Lags)
	}
	if !slices.Equal(res.Armed, []hourglass.DueItem{{ID: 12, At: c.FireAt}}) || !slices.Equal(res.Cancelled, []int64{11}) {
		t.Errorf("Result end states = armed %v, cancelled %v; want c armed, a cancelled", res.Armed, res.Cancelled)
	}

	// A database error, and a refusal an arm never gets, fail the batch.
	q := PlanTimerRequests([]RequestRow{armRow(1, "a", 1), cancelRow(2, "b")}, nil, now, Facts{Room: hourglass.NoTimerLimit})
	if err := q[0].Settle(hourglass.Timer{}, errors.New("connection reset")); err == nil {
		t.Error("Settle of a database error = nil, want the error (the batch rolls back)")
	}
	if err := q[0].Settle(hourglass.Timer{}, hourglass.Errorf(hourglass.CodeTimerFired, "fired")); err == nil {
		t.Error("Settle of an arm answered timer_fired = nil, want the error")
	}
	if err := q[1].Settle(hourglass.Timer{}, hourglass.Errorf(hourglass.CodeUnavailable, "down")); err == nil {
		t.Error("Settle of a cancel answered unavailable = nil, want the error")
	}
}
