package engine

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
)

// TestCloseProvenance: each of the engine's close paths records its cause
// and the engine's node with the close (and a timer's fire): the close
// path at the deadline, a deadline delivered that passed before the
// process started (recovery), the sweeper, start-up recovery's sweep, a
// gained partition's sweep and the payment check's two decisions.
func TestCloseProvenance(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	f := setup(t, clock)
	e := f.engine(t, Config{Node: "node-7"})
	cause := func(id int64) hourglass.Closer {
		t.Helper()
		h, err := f.store.History(f.ctx, hourglass.HistoryParams{Subject: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range h.Events {
			if ev.Type == hourglass.EventOrderClosed || ev.Type == hourglass.EventTimerFired {
				return ev.By
			}
		}
		t.Fatalf("subject %d has no close: %+v", id, h.Events)
		return hourglass.Closer{}
	}
	due := func(o hourglass.Order) []hourglass.DueItem { return []hourglass.DueItem{{ID: o.ID, At: o.Deadline}} }
	want := func(id int64, c hourglass.CloseCause) {
		t.Helper()
		if got := cause(id); got != (hourglass.Closer{Cause: c, Node: "node-7"}) {
			t.Fatalf("subject %d closed by %+v, want %s on node-7", id, got, c)
		}
	}

	atDeadline := f.create(t, time.Second)
	timer, _, err := f.store.ArmTimer(f.ctx, hourglass.ArmTimerParams{Key: "t", FireAt: hourglasstest.Epoch.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	e.started.Store(hourglass.UnixMilli(hourglasstest.Epoch)) // both due after the start
	if err := e.deliver(f.ctx, append(due(atDeadline), hourglass.DueItem{ID: timer.ID, At: timer.FireAt})); err != nil {
		t.Fatal(err)
	}
	want(atDeadline.ID, hourglass.CauseDeadline)
	want(timer.ID, hourglass.CauseDeadline)

	// A delivery mixing a deadline that passed before the start (the
	// first window load's) with one after it.
	before, after := f.create(t, time.Second), f.create(t, 2*time.Second)
	clock.Advance(time.Second + time.Millisecond)
	e.started.Store(hourglass.UnixMilli(clock.Now()))
	clock.Advance(time.Second)
	if err := e.deliver(f.ctx, append(due(before), due(after)...)); err != nil {
		t.Fatal(err)
	}
	want(before.ID, hourglass.CauseRecovery)
	want(after.ID, hourglass.CauseDeadline)

	swept := f.create(t, time.Second)
	clock.Advance(time.Second)
	if _, err := e.sweep(f.ctx, 0, hourglass.CauseSweeper); err != nil {
		t.Fatal(err)
	}
	want(swept.ID, hourglass.CauseSweeper)

	recovered := f.create(t, time.Second)
	clock.Advance(time.Second)
	e.recover(f.ctx)
	want(recovered.ID, hourglass.CauseRecovery)

	taken := f.create(t, time.Second)
	clock.Advance(time.Second)
	if err := e.takeOver(f.ctx, nil); err != nil {
		t.Fatal(err)
	}
	want(taken.ID, hourglass.CauseTakeover)

	checked, failed := f.create(t, time.Second), f.create(t, time.Second)
	clock.Advance(time.Second)
	if err := e.closeGated(true)(f.ctx, []int64{checked.ID}, hourglass.CauseCheckClose); err != nil {
		t.Fatal(err)
	}
	if err := e.closeGated(false)(f.ctx, []int64{failed.ID}, hourglass.CauseCheckFailed); err != nil {
		t.Fatal(err)
	}
	want(checked.ID, hourglass.CauseCheckClose)
	want(failed.ID, hourglass.CauseCheckFailed)
}
