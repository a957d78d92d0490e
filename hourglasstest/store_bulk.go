package hourglasstest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseBulk covers hourglass.BulkStore: ApplyBulk's items in one
// transaction, each refused alone, in order, with their events; the
// bulk_actions rows: create (one running per key, at most
// MaxBulkRunning), claim with a lease, the progress written only by the
// lease's owner and only while running, stop, list and prune.
func exerciseBulk(t *testing.T, h StoreHarness) {
	t.Run("Items", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		f.product(t, "A", "x", 100)
		f.webhook(t, "all", hourglass.EventTypeAll)
		o1 := f.create(t, time.Minute, item("A", 1))
		o2 := f.create(t, time.Minute, item("A", 1))
		o3 := f.create(t, time.Minute, item("A", 1))
		f.transition(t, o2.ID, hourglass.ActionCancel)
		// One dead letter: o1's order.created delivery fails.
		ds := f.pendingDeliveries(t)
		if len(ds) < 2 {
			t.Fatalf("%d deliveries, want at least 2", len(ds))
		}
		for _, d := range ds[:2] {
			if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: d.ID, Error: "down", WebhookID: d.WebhookID, OrderID: d.OrderID}); err != nil || !rec.Recorded {
				t.Fatalf("record dead %d: %v, %v", d.ID, rec.Recorded, err)
			}
		}
		if c := f.deliveryCounts(t); c[1] != 2 {
			t.Fatalf("dead letters %d, want 2", c[1])
		}
		before := len(f.events(t, o1.ID))
		items := []hourglass.BulkItem{
			{Kind: hourglass.BulkItemArmTimer, Arm: hourglass.ArmTimerParams{Key: "k1", Delay: time.Minute}},
			{Kind: hourglass.BulkItemArmTimer, Arm: hourglass.ArmTimerParams{Key: "k2", Delay: time.Minute}},
			{Kind: hourglass.BulkItemCancelTimer, Key: "k2"},
			{Kind: hourglass.BulkItemCancelTimer, Key: "k2"},
			{Kind: hourglass.BulkItemCancelTimer, Key: "nope"},
			{Kind: hourglass.BulkItemCancelOrder, ID: o1.ID},
			{Kind: hourglass.BulkItemCancelOrder, ID: o2.ID},
			{Kind: hourglass.BulkItemExtendOrder, ID: o3.ID, Extend: hourglass.ExtendOrderParams{By: time.Minute}},
			{Kind: hourglass.BulkItemRetryDeadLetter, ID: ds[0].ID},
			{Kind: hourglass.BulkItemDeleteDeadLetter, ID: ds[1].ID},
			{Kind: hourglass.BulkItemDeleteDeadLetter, ID: ds[1].ID},
			{Kind: hourglass.BulkItemRetryDeadLetter, ID: 999999},
		}
		res, err := f.db.ApplyBulk(f.ctx, items, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != len(items) {
			t.Fatalf("%d results, want %d", len(res), len(items))
		}
		want := []struct {
			changed bool
			code    hourglass.Code
		}{
			{true, ""}, {true, ""}, {true, ""}, {false, ""}, {false, hourglass.CodeNotFound},
			{true, ""}, {false, hourglass.CodeInvalidTransition}, {true, ""},
			{true, ""}, {true, ""}, {false, hourglass.CodeNotFound}, {false, hourglass.CodeNotFound},
		}
		for i, w := range want {
			if res[i].Changed != w.changed || hourglass.ErrorCode(res[i].Err) != w.code {
				t.Errorf("item %d: changed %v err %v, want changed %v code %q", i, res[i].Changed, res[i].Err, w.changed, w.code)
			}
		}
		if !res[0].Created || res[0].Timer.Key != "k1" || res[3].Timer.Status != hourglass.TimerCancelled {
			t.Errorf("timers: %+v, %+v", res[0], res[3])
		}
		if got := f.order(t, o1.ID).Status; got != hourglass.StateCancelled {
			t.Errorf("o1 %s, want cancelled", got)
		}
		if got := f.order(t, o3.ID).Deadline; !got.Equal(o3.Deadline.Add(time.Minute)) {
			t.Errorf("o3 deadline %v, want %v", got, o3.Deadline.Add(time.Minute))
		}
		if evs := f.events(t, o1.ID); len(evs) != before+1 || evs[len(evs)-1].Type != hourglass.EventOrderCancelled {
			t.Errorf("o1 events %d (last %v), want one more, order.cancelled", len(evs), evs[len(evs)-1].Type)
		}
		if tm, err := f.db.Timer(f.ctx, "k2"); err != nil || tm.Status != hourglass.TimerCancelled {
			t.Errorf("k2: %v %v", tm.Status, err)
		}
		if c := f.deliveryCounts(t); c[1] != 0 {
			t.Errorf("dead letters %d, want 0", c[1])
		}
	})

	t.Run("TooMany", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		if _, err := f.db.ApplyBulk(f.ctx, make([]hourglass.BulkItem, hourglass.MaxBulkIDs+1), nil); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
			t.Fatalf("1001 items: %v, want invalid_argument", err)
		}
		for i := range hourglass.MaxBulkRunning {
			if _, created, err := f.db.CreateBulkAction(f.ctx, bulkAction(fmt.Sprintf("a%02d", i), fmt.Sprint("key", i))); err != nil || !created {
				t.Fatalf("create %d: %v %v", i, created, err)
			}
		}
		_, _, err := f.db.CreateBulkAction(f.ctx, bulkAction("a99", "key99"))
		if hourglass.ErrorCode(err) != hourglass.CodeTooManyBulkActions {
			t.Fatalf("create 11th: %v, want too_many_bulk_actions", err)
		}
		// The same key while it runs is the running one, even when full.
		a, created, err := f.db.CreateBulkAction(f.ctx, bulkAction("a98", "key3"))
		if err != nil || created || a.ID != "a03" {
			t.Fatalf("same key: %v %v %v, want a03", a.ID, created, err)
		}
	})

	t.Run("Lifecycle", func(t *testing.T) {
		t.Parallel()
		f := setupStore(t, h)
		for _, k := range []string{"t1", "t2", "t3"} {
			if _, _, err := f.db.ArmTimer(f.ctx, hourglass.ArmTimerParams{Key: k, Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		a, created, err := f.db.CreateBulkAction(f.ctx, bulkAction("b1", "K"))
		if err != nil || !created || a.State != hourglass.BulkRunning || !a.CreatedAt.Equal(Epoch) {
			t.Fatalf("create: %+v %v %v", a, created, err)
		}
		got, err := f.db.BulkAction(f.ctx, "b1")
		if err != nil || got.Action != hourglass.BulkCancelTimers || string(got.Spec) != `{"prefix":"t"}` || got.Reason != "why" || got.Rate != 5 || got.RunningKey != "K" {
			t.Fatalf("read: %+v %v", got, err)
		}
		if _, err := f.db.BulkAction(f.ctx, "nope"); !errors.Is(err, hourglass.ErrNotFound) {
			t.Fatalf("unknown: %v", err)
		}
		c, ok, err := f.db.ClaimBulkAction(f.ctx, "node-a", 10*time.Second)
		if err != nil || !ok || c.ID != "b1" || c.Owner != "node-a" {
			t.Fatalf("claim: %+v %v %v", c, ok, err)
		}
		if _, ok, err := f.db.ClaimBulkAction(f.ctx, "node-b", 10*time.Second); err != nil || ok {
			t.Fatalf("claim held: %v %v", ok, err)
		}
		page := []hourglass.BulkItem{{Kind: hourglass.BulkItemCancelTimer, Key: "t1"}}
		// Not the owner: nothing written.
		_, err = f.db.ApplyBulk(f.ctx, page, &hourglass.BulkProgress{ID: "b1", Owner: "node-b", Lease: time.Second, Cursor: "t1", Done: 1})
		if hourglass.ErrorCode(err) != hourglass.CodeBulkLeaseLost {
			t.Fatalf("other owner: %v", err)
		}
		if tm, _ := f.db.Timer(f.ctx, "t1"); tm.Status != hourglass.TimerScheduled {
			t.Fatalf("t1 %s after a refused page", tm.Status)
		}
		if _, err := f.db.ApplyBulk(f.ctx, page, &hourglass.BulkProgress{ID: "b1", Owner: "node-a", Lease: 10 * time.Second, Cursor: "t1", Matched: 1}); err != nil {
			t.Fatal(err)
		}
		got, _ = f.db.BulkAction(f.ctx, "b1")
		if got.Cursor != "t1" || got.Matched != 1 || got.Done != 1 || got.Failed != 0 || !got.LeaseUntil.Equal(Epoch.Add(10*time.Second)) {
			t.Fatalf("progress: %+v", got)
		}
		// node-a stalls; its lease runs out and node-b takes over.
		f.clock.Set(Epoch.Add(11 * time.Second))
		c, ok, err = f.db.ClaimBulkAction(f.ctx, "node-b", 10*time.Second)
		if err != nil || !ok || c.Owner != "node-b" || c.Cursor != "t1" || c.Done != 1 {
			t.Fatalf("take over: %+v %v %v", c, ok, err)
		}
		page = []hourglass.BulkItem{{Kind: hourglass.BulkItemCancelTimer, Key: "t2"}}
		if _, err := f.db.ApplyBulk(f.ctx, page, &hourglass.BulkProgress{ID: "b1", Owner: "node-a", Lease: time.Second, Cursor: "t2", Done: 1}); hourglass.ErrorCode(err) != hourglass.CodeBulkLeaseLost {
			t.Fatalf("old owner: %v", err)
		}
		if _, err := f.db.ApplyBulk(f.ctx, page, &hourglass.BulkProgress{ID: "b1", Owner: "node-b", Lease: time.Second, Cursor: "t2", Matched: 1, Failed: 1}); err != nil {
			t.Fatal(err)
		}
		s, err := f.db.StopBulkAction(f.ctx, "b1")
		if err != nil || s.State != hourglass.BulkStopped || !s.FinishedAt.Equal(Epoch.Add(11*time.Second)) || s.Failed != 1 || s.Done != 2 || s.Matched != 2 {
			t.Fatalf("stop: %+v %v", s, err)
		}
		page = []hourglass.BulkItem{{Kind: hourglass.BulkItemCancelTimer, Key: "t3"}}
		if _, err := f.db.ApplyBulk(f.ctx, page, &hourglass.BulkProgress{ID: "b1", Owner: "node-b", Lease: time.Second, Cursor: "t3", Done: 1}); hourglass.ErrorCode(err) != hourglass.CodeBulkLeaseLost {
			t.Fatalf("after stop: %v", err)
		}
		if tm, _ := f.db.Timer(f.ctx, "t3"); tm.Status != hourglass.TimerScheduled {
			t.Fatalf("t3 %s after stop", tm.Status)
		}
		if s2, err := f.db.StopBulkAction(f.ctx, "b1"); err != nil || s2.State != hourglass.BulkStopped {
			t.Fatalf("stop again: %+v %v", s2, err)
		}
		if _, err := f.db.StopBulkAction(f.ctx, "nope"); !errors.Is(err, hourglass.ErrNotFound) {
			t.Fatalf("stop unknown: %v", err)
		}
		// The key is free again; the new one finishes done.
		a, created, err = f.db.CreateBulkAction(f.ctx, bulkAction("b2", "K"))
		if err != nil || !created {
			t.Fatalf("create again: %v %v", created, err)
		}
		if _, ok, err := f.db.ClaimBulkAction(f.ctx, "node-b", time.Minute); err != nil || !ok {
			t.Fatalf("claim b2: %v %v", ok, err)
		}
		// node-b shuts down: its release lets node-a claim at once; a
		// release by another owner changes nothing.
		if err := f.db.ReleaseBulkAction(f.ctx, "b2", "node-a"); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := f.db.ClaimBulkAction(f.ctx, "node-a", time.Second); ok {
			t.Fatal("claimed a lease another owner released on its behalf")
		}
		if err := f.db.ReleaseBulkAction(f.ctx, "b2", "node-b"); err != nil {
			t.Fatal(err)
		}
		if c, ok, err := f.db.ClaimBulkAction(f.ctx, "node-a", time.Second); err != nil || !ok || c.ID != "b2" {
			t.Fatalf("claim b2 after its release: %+v %v %v", c, ok, err)
		}
		f.clock.Set(Epoch.Add(20 * time.Second))
		if _, err := f.db.ApplyBulk(f.ctx, nil, &hourglass.BulkProgress{ID: "b2", Owner: "node-a", Finish: hourglass.BulkDone}); err != nil {
			t.Fatal(err)
		}
		got, _ = f.db.BulkAction(f.ctx, "b2")
		if got.State != hourglass.BulkDone || got.RunningKey != "" || got.Owner != "" || !got.FinishedAt.Equal(Epoch.Add(20*time.Second)) {
			t.Fatalf("done: %+v", got)
		}
		if _, ok, err := f.db.ClaimBulkAction(f.ctx, "node-a", time.Second); err != nil || ok {
			t.Fatalf("claim with none running: %v %v", ok, err)
		}
		if _, _, err := f.db.CreateBulkAction(f.ctx, bulkAction("b3", "K3")); err != nil {
			t.Fatal(err)
		}
		list, err := f.db.BulkActions(f.ctx, "", 2)
		if err != nil || len(list) != 2 || list[0].ID != "b3" || list[1].ID != "b2" {
			t.Fatalf("list: %v %v", bulkIDs(list), err)
		}
		list, err = f.db.BulkActions(f.ctx, "b2", 10)
		if err != nil || len(list) != 1 || list[0].ID != "b1" {
			t.Fatalf("list after b2: %v %v", bulkIDs(list), err)
		}
		// Prune: finished before 15 s is b1 only; running b3 stays.
		n, err := f.db.PruneBulkActions(f.ctx, Epoch.Add(15*time.Second), 10)
		if err != nil || n != 1 {
			t.Fatalf("prune: %d %v", n, err)
		}
		n, err = f.db.PruneBulkActions(f.ctx, Epoch.Add(time.Hour), 10)
		if err != nil || n != 1 {
			t.Fatalf("prune 2: %d %v", n, err)
		}
		if list, _ := f.db.BulkActions(f.ctx, "", 10); len(list) != 1 || list[0].ID != "b3" {
			t.Fatalf("left: %v", bulkIDs(list))
		}
	})
}

func bulkAction(id, key string) hourglass.BulkAction {
	return hourglass.BulkAction{ID: id, Action: hourglass.BulkCancelTimers, Reason: "why", Spec: []byte(`{"prefix":"t"}`), RunningKey: key, Rate: 5}
}

func bulkIDs(as []hourglass.BulkAction) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.ID)
	}
	return out
}
