package nodes

import (
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// TestJudgeTimers: each case is one armed timer of the ledger, what the
// database holds of it, and the problem kinds the verdict must find.
func TestJudgeTimers(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	later := at.Add(2 * time.Second)
	const id = hourglass.TimerIDBase + 5
	acked := []Attempt{{Node: "a", Status: 200}}
	other := []Attempt{{Node: "b", Status: 200}}
	fired := func(fireAt, firedAt time.Time) *hourglass.Timer {
		return &hourglass.Timer{ID: id, Key: "k", Status: hourglass.TimerFired, FireAt: fireAt, FiredAt: firedAt}
	}
	cancelled := &hourglass.Timer{ID: id, Key: "k", Status: hourglass.TimerCancelled, FireAt: at}
	tests := []struct {
		name   string
		armed  ArmedTimer
		stored *hourglass.Timer // nil: not in the database
		events int              // its timer.fired events
		want   []string
	}{
		{"fired once", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked}, fired(at, at.Add(time.Second)), 1, nil},
		{"fired twice", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked}, fired(at, at), 2, []string{ProblemTimerTwice}},
		{"early", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked}, fired(at, at.Add(-time.Millisecond)), 1, []string{ProblemTimerEarly}},
		{"late", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked}, fired(at, at.Add(4*time.Second)), 1, []string{ProblemTimerLate}},
		{"lost", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked}, nil, 0, []string{ProblemTimerLost}},
		{"unknown arm, absent", ArmedTimer{FireAt: at, Outcome: Unknown}, nil, 0, nil},
		{"still scheduled", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked},
			&hourglass.Timer{ID: id, Key: "k", Status: hourglass.TimerScheduled, FireAt: at}, 0, []string{ProblemTimerLost}},
		{"re-armed, fired at the new time", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Rearm: &TimerChange{FireAt: later, AnsweredAt: at.Add(-time.Second), Outcome: Acknowledged, Attempts: other}}, fired(later, later), 1, nil},
		{"re-armed, fired at the old time", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Rearm: &TimerChange{FireAt: later, AnsweredAt: at.Add(-time.Second), Outcome: Acknowledged, Attempts: other}}, fired(at, at), 1, []string{ProblemTimerContradicted}},
		{"re-arm answered after the first time, fired at both", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Rearm: &TimerChange{FireAt: later, AnsweredAt: at.Add(time.Millisecond), Outcome: Acknowledged, Attempts: other}}, fired(later, later), 2, nil},
		{"cancelled", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Cancel: &TimerChange{Outcome: Acknowledged, Attempts: other}}, cancelled, 0, nil},
		{"cancel acknowledged, fired", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Cancel: &TimerChange{Outcome: Acknowledged, Attempts: other}}, fired(at, at), 1, []string{ProblemTimerContradicted}},
		{"cancelled with a fire event", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Cancel: &TimerChange{Outcome: Acknowledged, Attempts: other}}, cancelled, 1, []string{ProblemTimerContradicted}},
		{"cancel refused as fired, fired", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Cancel: &TimerChange{Outcome: Refused, Attempts: []Attempt{{Node: "b", Status: 409, Code: string(hourglass.CodeTimerFired)}}}}, fired(at, at), 1, nil},
		{"cancel refused as fired, cancelled", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Cancel: &TimerChange{Outcome: Unknown, Attempts: []Attempt{{Node: "b", Err: "EOF"}, {Node: "c", Status: 409, Code: string(hourglass.CodeTimerFired)}}}}, cancelled, 0, []string{ProblemTimerContradicted}},
		{"cancel unanswered, fired", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked,
			Cancel: &TimerChange{Outcome: Unknown, Attempts: []Attempt{{Node: "b", Err: "EOF"}}}}, fired(at, at), 1, nil},
		{"arm handled after its fire_at: now is stored", ArmedTimer{FireAt: at, AnsweredAt: at.Add(300 * time.Millisecond), Outcome: Acknowledged, Attempts: acked},
			fired(at.Add(200*time.Millisecond), at.Add(210*time.Millisecond)), 1, nil},
		{"stored fire_at after the arm's answer", ArmedTimer{FireAt: at, AnsweredAt: at.Add(300 * time.Millisecond), Outcome: Acknowledged, Attempts: acked},
			fired(at.Add(500*time.Millisecond), at.Add(510*time.Millisecond)), 1, []string{ProblemTimerContradicted}},
		{"stored fire_at before the arm's", ArmedTimer{FireAt: at, AnsweredAt: at.Add(300 * time.Millisecond), Outcome: Acknowledged, Attempts: acked},
			fired(at.Add(-time.Millisecond), at), 1, []string{ProblemTimerContradicted}},
		{"cancelled without a cancel", ArmedTimer{FireAt: at, Outcome: Acknowledged, Attempts: acked}, cancelled, 0, []string{ProblemTimerContradicted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a := tt.armed
			a.Key = "k"
			var stored []hourglass.Timer
			events := map[int64][]hourglass.EventRecord{}
			if tt.stored != nil {
				stored = append(stored, *tt.stored)
				for range tt.events {
					events[id] = append(events[id], hourglass.EventRecord{Type: hourglass.EventTimerFired, OrderID: id})
				}
			}
			v := &Verdict{}
			judgeTimers([]*ArmedTimer{&a}, stored, events, 3*time.Second, v)
			var got []string
			for kind := range v.Problems {
				got = append(got, kind)
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems %v, want kinds %v", v.Problems, tt.want)
			}
		})
	}
}

// TestPick: a change goes through another live node than the one that
// armed the timer while there is one.
func TestPick(t *testing.T) {
	t.Parallel()
	live := []*Node{{id: "a"}, {id: "b"}, {id: "c"}}
	for cursor := range uint64(6) {
		if got := pick(live, cursor, "b"); got.ID() == "b" {
			t.Errorf("pick(cursor %d, avoid b) = b", cursor)
		}
		if got, want := pick(live, cursor, ""), live[cursor%3]; got != want {
			t.Errorf("pick(cursor %d) = %s, want %s", cursor, got.ID(), want.ID())
		}
	}
	if got := pick(live[1:2], 7, "b"); got.ID() != "b" {
		t.Errorf("pick of the only live node, avoided = %s, want b", got.ID())
	}
}
