package nodes

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
)

// Timers in a Load (issue 12): besides its creates and pays, a Load can arm
// named timers round-robin through the live nodes, and re-arm or cancel
// some of them shortly after through another node than the one that
// answered the arm, so that a timer's partition owner, the node that armed
// it and the node that changed it are usually three different processes.
// Judge then checks each from the database: fired exactly once (one
// timer.fired event), never before its fire_at, at the time it was last
// armed for, within JudgeConfig.LateBound; a cancelled one never.

// timerChangeDelay is how long after its arm is answered a timer is
// re-armed or cancelled: well before its fire time (LoadConfig.TimeoutMin,
// at least 1 s, after the arm was sent), so that neither races the fire.
const timerChangeDelay = 200 * time.Millisecond

// ArmedTimer is one timer a Load armed, with its re-arm or cancel.
type ArmedTimer struct {
	Key string
	// FireAt is the fire_at the arm sent (absolute, whole milliseconds,
	// so that a retry through another node is the same request).
	FireAt time.Time
	// AnsweredAt is when the arm's last attempt ended.
	AnsweredAt time.Time
	Attempts   []Attempt
	Outcome    Outcome
	// Rearm and Cancel are what the load did next, through another node
	// than the one that acknowledged the arm; at most one is set, and only
	// after an acknowledged arm.
	Rearm  *TimerChange
	Cancel *TimerChange
}

// ArmedBy returns the id of the node that acknowledged the arm, or "".
func (a *ArmedTimer) ArmedBy() string {
	if a.Outcome != Acknowledged || len(a.Attempts) == 0 {
		return ""
	}
	return a.Attempts[len(a.Attempts)-1].Node
}

// TimerChange is a re-arm or a cancel of an ArmedTimer.
type TimerChange struct {
	// FireAt is a re-arm's new fire_at (whole milliseconds); zero for a
	// cancel.
	FireAt time.Time
	// AnsweredAt is when its last attempt ended: a change answered after
	// the timer's first fire time may have come after the fire.
	AnsweredAt time.Time
	Attempts   []Attempt
	Outcome    Outcome
}

// Fired reports whether an attempt was refused with timer_fired: the timer
// had fired before the change reached it.
func (c *TimerChange) Fired() bool {
	for _, a := range c.Attempts {
		if a.Code == string(hourglass.CodeTimerFired) {
			return true
		}
	}
	return false
}

// LastFireAt returns the latest fire time a timer of the ledger was armed
// or re-armed for (zero without timers).
func (l *Ledger) LastFireAt() time.Time {
	var last time.Time
	for _, a := range l.Timers {
		if a.FireAt.After(last) {
			last = a.FireAt
		}
		if r := a.Rearm; r != nil && r.FireAt.After(last) {
			last = r.FireAt
		}
	}
	return last
}

// timerNext is what a Load does to a timer after arming it.
type timerNext int

const (
	timerKeep timerNext = iota
	timerRearm
	timerCancel
)

// runTimers arms timers at TimerRate until ctx ends.
func (l *Load) runTimers(ctx context.Context) {
	rng := rand.New(rand.NewPCG(l.cfg.Seed, 0x74696d65))
	tick := time.NewTicker(time.Duration(float64(time.Second) / l.cfg.TimerRate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		a := &ArmedTimer{
			Key:    fmt.Sprintf("t%d-%d", l.cfg.Seed%100000, n),
			FireAt: time.Now().Add(l.lead(rng)).Truncate(time.Millisecond),
		}
		next := timerKeep
		switch r := rng.Float64(); {
		case r < l.cfg.TimerRearmShare:
			next = timerRearm
		case r < l.cfg.TimerRearmShare+l.cfg.TimerCancelShare:
			next = timerCancel
		}
		rearmLead := l.lead(rng)
		select {
		case l.flight <- struct{}{}:
		default:
			l.mu.Lock()
			l.ledger.TimersSkipped++
			l.mu.Unlock()
			continue
		}
		l.mu.Lock()
		l.ledger.Timers = append(l.ledger.Timers, a)
		l.mu.Unlock()
		l.wg.Go(func() { l.arm(ctx, a, next, rearmLead, func() { <-l.flight }) })
	}
}

// lead draws a timer's time to its fire time, as an order's timeout.
func (l *Load) lead(rng *rand.Rand) time.Duration {
	return l.cfg.TimeoutMin + time.Duration(rng.Int64N(int64(l.cfg.TimeoutMax-l.cfg.TimeoutMin)+1))
}

// arm sends a's arm (and its retries), calls release, then after
// timerChangeDelay re-arms it (to rearmLead from then) or cancels it, as
// next says, through another node than the one that acknowledged the arm.
func (l *Load) arm(ctx context.Context, a *ArmedTimer, next timerNext, rearmLead time.Duration, release func()) {
	req := api.ArmTimerRequest{FireAt: a.FireAt.UTC().Format(time.RFC3339Nano)}
	var attempts []Attempt
	outcome := l.send(ctx, &attempts, "", func(cl *api.Client) error {
		_, _, err := cl.ArmTimer(context.Background(), a.Key, req)
		return err
	})
	release()
	l.mu.Lock()
	a.Attempts, a.Outcome, a.AnsweredAt = attempts, outcome, time.Now()
	l.mu.Unlock()
	if next == timerKeep || outcome != Acknowledged {
		return
	}
	change := &TimerChange{}
	l.mu.Lock()
	if next == timerRearm {
		a.Rearm = change
	} else {
		a.Cancel = change
	}
	l.mu.Unlock()
	select {
	case <-ctx.Done():
		return // NotSent
	case <-time.After(timerChangeDelay):
	}
	do := func(cl *api.Client) error {
		_, err := cl.CancelTimer(context.Background(), a.Key)
		return err
	}
	if next == timerRearm {
		fireAt := time.Now().Add(rearmLead).Truncate(time.Millisecond)
		l.mu.Lock()
		change.FireAt = fireAt
		l.mu.Unlock()
		req := api.ArmTimerRequest{FireAt: fireAt.UTC().Format(time.RFC3339Nano)}
		do = func(cl *api.Client) error {
			_, _, err := cl.ArmTimer(context.Background(), a.Key, req)
			return err
		}
	}
	var changeAttempts []Attempt
	changeOutcome := l.send(ctx, &changeAttempts, a.ArmedBy(), do)
	l.mu.Lock()
	change.Attempts, change.Outcome, change.AnsweredAt = changeAttempts, changeOutcome, time.Now()
	l.mu.Unlock()
}

// settleTimers reads every timer until none is scheduled past its fire_at,
// or timeout passes, and returns them all, by key.
func settleTimers(ctx context.Context, db hourglass.Database, timeout time.Duration) ([]hourglass.Timer, error) {
	giveUp := time.Now().Add(timeout)
	for {
		var all []hourglass.Timer
		after := ""
		for {
			page, err := db.Timers(ctx, hourglass.TimerFilter{After: after, Limit: 1000})
			if err != nil {
				return nil, fmt.Errorf("nodes: judge: list timers: %w", err)
			}
			all = append(all, page...)
			if len(page) < 1000 {
				break
			}
			after = page[len(page)-1].Key
		}
		now := time.Now()
		open := slices.ContainsFunc(all, func(t hourglass.Timer) bool {
			return t.Status == hourglass.TimerScheduled && !t.FireAt.After(now)
		})
		if !open || now.After(giveUp) {
			return all, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// judgeTimers checks the timers in the database against the load's arms,
// re-arms and cancels, and each one's events, into v.
func judgeTimers(armed []*ArmedTimer, timers []hourglass.Timer, events map[int64][]hourglass.EventRecord, lateBound time.Duration, v *Verdict) {
	now := time.Now()
	v.Timers, v.TimerStatuses = len(timers), map[string]int{}
	byKey := make(map[string]hourglass.Timer, len(timers))
	for _, tm := range timers {
		byKey[tm.Key] = tm
		v.TimerStatuses[string(tm.Status)]++
	}
	asked := make(map[string]bool, len(armed))
	var lateness []time.Duration
	for _, a := range armed {
		asked[a.Key] = true
		tm, ok := byKey[a.Key]
		switch a.Outcome {
		case Acknowledged:
			if !ok {
				v.problem(ProblemTimerLost, "timer %s was acknowledged but is not in the database", a.Key)
				continue
			}
		case Refused:
			if ok {
				v.problem(ProblemTimerContradicted, "the arm of %s was refused (%v) but timer %d exists", a.Key, a.Attempts, tm.ID)
			}
			continue
		default:
			if !ok {
				v.UnknownUnarmed++
				continue
			}
			v.UnknownArmed++
		}

		// What it may have ended as, given the answers to its changes.
		fireAts := []armedFor{{a.FireAt, a.AnsweredAt, a.Outcome}}
		twice := false // it may have fired at its first time, then been re-armed
		if r := a.Rearm; r != nil && (r.Outcome == Acknowledged || r.Outcome == Unknown) {
			if r.Outcome == Acknowledged {
				fireAts = fireAts[:0]
			}
			fireAts = append(fireAts, armedFor{r.FireAt, r.AnsweredAt, r.Outcome})
			twice = r.AnsweredAt.After(a.FireAt)
		}
		c := a.Cancel
		mustCancel := c != nil && c.Outcome == Acknowledged
		mayCancel := mustCancel || c != nil && c.Outcome == Unknown && !c.Fired()

		fired := count(events[tm.ID], hourglass.EventTimerFired)
		switch tm.Status {
		case hourglass.TimerCancelled:
			if !mayCancel {
				v.problem(ProblemTimerContradicted, "timer %s is cancelled, though no cancel of it can have been written (%s)", a.Key, changeString(c))
			}
			if fired > 0 {
				v.problem(ProblemTimerContradicted, "timer %s is cancelled and has %d timer.fired events", a.Key, fired)
			}
		case hourglass.TimerFired:
			if mustCancel {
				v.problem(ProblemTimerContradicted, "timer %s fired at %s, though its cancel was acknowledged (%v)", a.Key, fmtTime(tm.FiredAt), c.Attempts)
			}
			switch {
			case fired == 2 && twice:
				v.TimersFiredAtBoth++
			case fired != 1:
				v.problem(ProblemTimerTwice, "timer %s (id %d) has %d timer.fired events, want 1", a.Key, tm.ID, fired)
			}
			if tm.FiredAt.IsZero() {
				v.problem(ProblemTimerLost, "timer %s is fired without fired_at", a.Key)
				continue
			}
			if !slices.ContainsFunc(fireAts, func(f armedFor) bool { return f.wrote(tm.FireAt) }) {
				v.problem(ProblemTimerContradicted, "timer %s fired for fire_at %s, but was last armed for %s", a.Key, fmtTime(tm.FireAt), fmtTimes(fireAts))
			}
			f := Fire{TimerID: tm.ID, Key: tm.Key, Partition: hourglass.PartitionOf(tm.ID), FireAt: tm.FireAt, FiredAt: tm.FiredAt}
			v.Fires = append(v.Fires, f)
			lateness = append(lateness, f.Lateness())
			if f.FiredAt.Before(f.FireAt) {
				v.problem(ProblemTimerEarly, "timer %s fired at %s, %s before its fire_at %s", a.Key, fmtTime(f.FiredAt), -f.Lateness(), fmtTime(f.FireAt))
			}
			if lateBound > 0 && f.Lateness() > lateBound {
				v.problem(ProblemTimerLate, "timer %s (partition %d) fired at %s, %s after its fire_at %s", a.Key, f.Partition, fmtTime(f.FiredAt), f.Lateness(), fmtTime(f.FireAt))
			}
		default:
			v.problem(ProblemTimerLost, "timer %s is %s, %s after its fire_at %s", a.Key, tm.Status, now.Sub(tm.FireAt).Round(time.Millisecond), fmtTime(tm.FireAt))
		}
	}
	for _, tm := range timers {
		if !asked[tm.Key] {
			v.problem(ProblemTimerContradicted, "timer %s (id %d) matches no arm of the load", tm.Key, tm.ID)
		}
	}
	if len(lateness) > 0 {
		slices.Sort(lateness)
		v.TimerLatenessP50 = lateness[len(lateness)/2]
		v.TimerLatenessP99 = lateness[len(lateness)*99/100]
		v.TimerLatenessMax = lateness[len(lateness)-1]
	}
}

// armedFor is an arm or re-arm request: the fire_at it sent, when it was
// answered, and how.
type armedFor struct {
	sent, answered time.Time
	outcome        Outcome
}

// wrote reports whether a timer's stored fire_at can be what the request
// wrote: the time it sent, or, when that time had passed by the time a
// node handled it (slow answers, retries through another node), the
// database's now then, which is after the time sent and, for an answered
// request, before the answer (1 ms for the store's rounding up).
func (f armedFor) wrote(fireAt time.Time) bool {
	if fireAt.Equal(f.sent) {
		return true
	}
	if !fireAt.After(f.sent) {
		return false
	}
	return f.outcome != Acknowledged || !fireAt.After(f.answered.Add(time.Millisecond))
}

func (f armedFor) String() string { return fmtTime(f.sent) }

func changeString(c *TimerChange) string {
	if c == nil {
		return "none sent"
	}
	return fmt.Sprintf("cancel %s %v", c.Outcome, c.Attempts)
}

func fmtTimes(ts []armedFor) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.String()
	}
	return strings.Join(s, " or ")
}
