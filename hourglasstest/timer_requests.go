package hourglasstest

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/txtimer"
)

// TimerRequestHarness tells ExerciseTimerRequests how to get a store and
// the shop's own connection to its database.
type TimerRequestHarness struct {
	// Open returns two store values on one new, empty database (two nodes'
	// appliers), and the shop's connection to that database with the
	// request table as the shop names it. The harness closes them in
	// t.Cleanup.
	Open func(t *testing.T) (a, b hourglass.TimerRequestStore, timers hourglass.TimerStore, shop *sql.DB, table txtimer.Table)
	// OwnColumns says the store sets seq and requested_at whatever a
	// shop's INSERT says (a trigger: PostgreSQL, MySQL), so that no shop can
	// break the table for the others.
	OwnColumns bool
}

// ExerciseTimerRequests runs the conformance suite of
// hourglass.TimerRequestStore: requests written by the shop's own
// transactions (through package txtimer, as a shop would) are applied
// exactly as the API would apply them, once, in seq order per key; a
// rolled-back transaction leaves nothing; what cannot be applied is listed
// with its reason and holds nothing up. Every case runs on the database's
// own clock.
func ExerciseTimerRequests(t *testing.T, h TimerRequestHarness) {
	testenv.RequireDefault(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T, TimerRequestHarness)
	}{
		{"CommittedArmApplied", requestCommittedArm},
		{"RolledBackLeavesNothing", requestRolledBack},
		{"ArmThenCancelInOneTransaction", requestArmThenCancel},
		{"CancelThenArm", requestCancelThenArm},
		{"RejectionsListed", requestRejections},
		{"ConcurrentTransactions", requestConcurrent},
		{"TwoAppliersExactlyOnce", requestTwoAppliers},
		{"Notified", requestNotified},
		{"RejectedPruned", requestRejectedPruned},
		{"APIRulesHold", requestAPIRules},
		{"SizesCheckedByTheDatabase", requestSizes},
		{"LargeValuesNeverRead", requestLargeValues},
		{"TimerMaxHolds", requestTimerMax},
		{"RequestedAtAtMostNow", requestRequestedAtFuture},
		{"ExplicitSeqBreaksNothing", requestExplicitSeq},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

// inTx runs fn in one transaction of the shop's and commits it (rollback:
// rolls it back).
func inTx(t *testing.T, shop *sql.DB, rollback bool, fn func(tx *sql.Tx) error) {
	t.Helper()
	tx, err := shop.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	if rollback {
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// applyAll applies until nothing is left and returns the sum.
func applyAll(t *testing.T, s hourglass.TimerRequestStore) hourglass.TimerRequestsApplied {
	t.Helper()
	var sum hourglass.TimerRequestsApplied
	for range maxPages {
		r, err := s.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 100, Room: hourglass.NoTimerLimit})
		if err != nil {
			t.Fatalf("ApplyTimerRequests: %v", err)
		}
		sum.Applied += r.Applied
		sum.Rejected += r.Rejected
		sum.Armed = append(sum.Armed, r.Armed...)
		sum.Cancelled = append(sum.Cancelled, r.Cancelled...)
		sum.Lags = append(sum.Lags, r.Lags...)
		if r.Applied+r.Rejected == 0 && !r.Full {
			return sum
		}
	}
	t.Fatal("ApplyTimerRequests did not run dry")
	return sum
}

func requestCommittedArm(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	// Not only ASCII: the request table keeps what the shop's connection
	// sends, whatever its character set.
	const payload = `{"order":42,"note":"crème brûlée ☕"}`
	before := time.Now()
	inTx(t, shop, false, func(tx *sql.Tx) error {
		return table.Arm(t.Context(), tx, txtimer.Arm{Key: "order:42", Delay: time.Minute, Payload: []byte(payload)})
	})
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	inTx(t, shop, false, func(tx *sql.Tx) error {
		return table.Arm(t.Context(), tx, txtimer.Arm{Key: "coupon:7", FireAt: at})
	})
	after := time.Now()
	// The store announces what it armed on its due feed, which the engine
	// follows, as it does ArmTimer's.
	var (
		feedMu    sync.Mutex
		announced = map[int64]time.Time{}
	)
	if feed, ok := a.(hourglass.DueFeed); ok {
		ctx, stop := context.WithCancel(t.Context())
		wait := feed.WatchDue(ctx, func(u hourglass.DueUpdate) {
			feedMu.Lock()
			defer feedMu.Unlock()
			for _, d := range u.Due {
				announced[d.ID] = d.At
			}
		})
		defer func() { stop(); wait() }()
	}
	res := applyAll(t, a)
	if res.Applied != 2 || res.Rejected != 0 || len(res.Armed) != 2 || len(res.Lags) != 2 {
		t.Fatalf("applied %+v; want 2 applied, 2 armed, 2 lags", res)
	}
	// A lag runs from requested_at (the database's clock, in UTC whatever
	// the shop's session time zone) to the commit: seconds at most here.
	for _, lag := range res.Lags {
		if lag < 0 || lag > 30*time.Second {
			t.Errorf("lags %v; want each from 0 to 30 s", res.Lags)
			break
		}
	}
	tm, err := timers.Timer(t.Context(), "order:42")
	if err != nil {
		t.Fatalf("the armed timer: %v", err)
	}
	// Up to a second of clock difference between this process and the
	// database server, and the millisecond rounding.
	lo, hi := before.Add(time.Minute-time.Second), after.Add(time.Minute+time.Second)
	if tm.Status != hourglass.TimerScheduled || tm.FireAt.Before(lo) || tm.FireAt.After(hi) || string(tm.Payload) != payload {
		t.Errorf("timer = %+v; want scheduled, fire_at a minute after the request (%s..%s), the payload", tm, lo, hi)
	}
	if res.Armed[0].ID != tm.ID || !res.Armed[0].At.Equal(tm.FireAt) {
		t.Errorf("armed %+v; want the timer's id %d and fire_at %s", res.Armed[0], tm.ID, tm.FireAt)
	}
	if _, ok := a.(hourglass.DueFeed); ok {
		feedMu.Lock()
		at, ok := announced[tm.ID]
		feedMu.Unlock()
		if !ok || !at.Equal(tm.FireAt) {
			t.Errorf("the due feed announced %v for timer %d; want it due at %s", at, tm.ID, tm.FireAt)
		}
	}
	tc, err := timers.Timer(t.Context(), "coupon:7")
	if err != nil || !tc.FireAt.Equal(at) {
		t.Errorf("the fire_at timer = %+v, %v; want fire_at %s", tc, err, at)
	}
	// Applied requests are gone: nothing more to apply.
	if again := applyAll(t, a); again.Applied+again.Rejected != 0 {
		t.Errorf("a second apply did %+v; want nothing", again)
	}
}

func requestRolledBack(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	inTx(t, shop, true, func(tx *sql.Tx) error {
		return table.Arm(t.Context(), tx, txtimer.Arm{Key: "order:1", Delay: time.Minute})
	})
	if res := applyAll(t, a); res.Applied+res.Rejected != 0 {
		t.Fatalf("applied %+v after a rollback; want nothing", res)
	}
	if _, err := timers.Timer(t.Context(), "order:1"); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Fatalf("Timer after a rollback = %v; want not_found", err)
	}
}

func requestArmThenCancel(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	inTx(t, shop, false, func(tx *sql.Tx) error {
		if err := table.Arm(t.Context(), tx, txtimer.Arm{Key: "order:2", Delay: time.Minute}); err != nil {
			return err
		}
		return table.Cancel(t.Context(), tx, "order:2")
	})
	res := applyAll(t, a)
	tm, err := timers.Timer(t.Context(), "order:2")
	if err != nil || tm.Status != hourglass.TimerCancelled {
		t.Fatalf("after an arm then a cancel in one transaction: %+v, %v; want cancelled", tm, err)
	}
	if res.Applied != 2 || len(res.Armed) != 0 || len(res.Cancelled) != 1 || res.Cancelled[0] != tm.ID {
		t.Errorf("applied %+v; want 2 applied, nothing left armed, timer %d cancelled", res, tm.ID)
	}
}

func requestCancelThenArm(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	inTx(t, shop, false, func(tx *sql.Tx) error {
		return table.Arm(t.Context(), tx, txtimer.Arm{Key: "order:3", Delay: time.Hour})
	})
	applyAll(t, a)
	inTx(t, shop, false, func(tx *sql.Tx) error {
		if err := table.Cancel(t.Context(), tx, "order:3"); err != nil {
			return err
		}
		return table.Arm(t.Context(), tx, txtimer.Arm{Key: "order:3", Delay: 2 * time.Hour})
	})
	// A cancel of a timer that does not exist changes nothing and is not
	// an error of the request.
	inTx(t, shop, false, func(tx *sql.Tx) error { return table.Cancel(t.Context(), tx, "order:404") })
	res := applyAll(t, a)
	tm, err := timers.Timer(t.Context(), "order:3")
	if err != nil || tm.Status != hourglass.TimerScheduled || time.Until(tm.FireAt) < 90*time.Minute {
		t.Fatalf("after a cancel then an arm: %+v, %v; want scheduled about 2 h ahead", tm, err)
	}
	if res.Applied != 3 || res.Rejected != 0 || len(res.Armed) != 1 || len(res.Cancelled) != 0 {
		t.Errorf("applied %+v; want 3 applied, order:3 left armed, none cancelled", res)
	}
}

func requestRejections(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	// The shop's own SQL, past txtimer's checks: what a hand-written
	// INSERT may hold.
	name, mark := table.Name, func(i int) string { return "?" }
	if table.Dialect == txtimer.Postgres {
		mark = func(i int) string { return fmt.Sprintf("$%d", i) }
	}
	insert := func(tx *sql.Tx, key, action any, fireAt, delay, payload, hook any) error {
		_, err := tx.ExecContext(t.Context(), fmt.Sprintf("INSERT INTO %s (timer_key, action, fire_at, delay_ms, payload, webhook_id) VALUES (%s, %s, %s, %s, %s, %s)",
			name, mark(1), mark(2), mark(3), mark(4), mark(5), mark(6)), key, action, fireAt, delay, payload, hook)
		return err
	}
	want := []struct {
		key, action   any
		fireAt, delay any
		payload, hook any
		reason        string
	}{
		{"bad key", "arm", nil, 1000, nil, nil, "key"},
		{nil, "arm", nil, 1000, nil, nil, "timer_key"},
		{"both", "arm", time.Now().UTC(), 1000, nil, nil, "fire_at, delay_ms"},
		{"neither", "arm", nil, nil, nil, nil, "fire_at, delay_ms"},
		{"negative", "arm", nil, -5, nil, nil, "delay_ms"},
		{"array", "arm", nil, 1000, "[1,2]", nil, "payload"},
		{"not-json", "arm", nil, 1000, "{order", nil, "payload"},
		{"no-hook", "arm", nil, 1000, nil, 999999, "webhook_id"},
		{"verb", "snooze", nil, 1000, nil, nil, "action"},
		{"far", "arm", time.Now().UTC().AddDate(2, 0, 0), nil, nil, nil, "fire_at"},
		// Written all the same (a column of ASCII, or of 200 characters,
		// would refuse the shop's INSERT), and rejected.
		{"clé:1", "arm", nil, 1000, nil, nil, "key"},
		{strings.Repeat("k", 300), "arm", nil, 1000, nil, nil, "key"},
	}
	inTx(t, shop, false, func(tx *sql.Tx) error {
		for i, w := range want {
			if err := insert(tx, w.key, w.action, w.fireAt, w.delay, w.payload, w.hook); err != nil {
				return err
			}
			if i == 4 { // a good one among them is applied all the same
				if err := table.Arm(t.Context(), tx, txtimer.Arm{Key: "good", Delay: time.Minute}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	res := applyAll(t, a)
	if res.Applied != 1 || res.Rejected != len(want) {
		t.Fatalf("applied %+v; want 1 applied, %d rejected", res, len(want))
	}
	if _, err := timers.Timer(t.Context(), "good"); err != nil {
		t.Errorf("the good request among the bad: %v", err)
	}
	n, err := a.RejectedTimerRequestCount(t.Context())
	if err != nil || n != int64(len(want)) {
		t.Fatalf("RejectedTimerRequestCount = %d, %v; want %d", n, err, len(want))
	}
	var got []hourglass.RejectedTimerRequest
	for after := int64(0); ; {
		page, err := a.RejectedTimerRequests(t.Context(), after, 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].Seq
	}
	if len(got) != len(want) {
		t.Fatalf("RejectedTimerRequests listed %d; want %d", len(got), len(want))
	}
	for i, r := range got {
		if !strings.Contains(r.Reason, want[i].reason) || r.RejectedAt.IsZero() || r.RequestedAt.IsZero() {
			t.Errorf("rejected %d (%v): reason %q, rejected at %s; want a reason naming %q", i, want[i].key, r.Reason, r.RejectedAt, want[i].reason)
		}
		if i > 0 && r.Seq <= got[i-1].Seq {
			t.Errorf("rejected requests not in seq order: %d after %d", r.Seq, got[i-1].Seq)
		}
	}
	if k := got[0].Key; k == nil || *k != "bad key" {
		t.Errorf("the first rejected request's key = %v; want the shop's %q as written", k, "bad key")
	}
}

func requestConcurrent(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	const writers, each = 16, 63 // 1,008 requests
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				tx, err := shop.BeginTx(context.Background(), nil)
				if err == nil {
					err = table.Arm(context.Background(), tx, txtimer.Arm{Key: fmt.Sprintf("w%d:%d", w, i), Delay: time.Hour})
					if err == nil {
						err = tx.Commit()
					} else {
						tx.Rollback()
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	res := applyAll(t, a)
	if res.Applied != writers*each || len(res.Armed) != writers*each {
		t.Fatalf("applied %d, armed %d; want %d each", res.Applied, len(res.Armed), writers*each)
	}
	counts, err := timers.TimerCounts(t.Context())
	if err != nil || counts[hourglass.TimerScheduled] != writers*each {
		t.Fatalf("timer counts %v, %v; want %d scheduled", counts, err, writers*each)
	}
}

// requestTwoAppliers: two store values (two nodes) apply concurrently
// while the shop writes arms and cancels of the same keys: every request
// is applied once, and each key ends as its last request left it.
func requestTwoAppliers(t *testing.T, h TimerRequestHarness) {
	a, b, timers, shop, table := h.Open(t)
	const keys, rounds = 50, 8
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	totals := make([]int, 2)
	for i, s := range []hourglass.TimerRequestStore{a, b} {
		wg.Go(func() {
			for ctx.Err() == nil {
				r, err := s.ApplyTimerRequests(context.Background(), hourglass.TimerRequestsParams{Limit: 20, Room: hourglass.NoTimerLimit})
				if err != nil {
					t.Errorf("applier %d: %v", i, err)
					return
				}
				totals[i] += r.Applied + r.Rejected
				if r.Applied+r.Rejected == 0 {
					testenv.Until(ctx, time.Now().Add(time.Millisecond)) // idle: look again in 1 ms, or stop
				}
			}
		})
	}
	for r := range rounds {
		inTx(t, shop, false, func(tx *sql.Tx) error {
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				var err error
				if (r+k)%2 == 0 {
					err = table.Arm(t.Context(), tx, txtimer.Arm{Key: key, Delay: time.Duration(r+1) * time.Hour})
				} else {
					err = table.Cancel(t.Context(), tx, key)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Let both run dry, then stop them.
	left := -1
	defer func() {
		if left > 0 {
			t.Logf("%d requests left", left)
		}
	}()
	testenv.EventuallyEvery(t, 30*time.Second, 10*time.Millisecond, "the appliers ran dry (no request left)", func() bool {
		if err := shop.QueryRowContext(t.Context(), "SELECT count(*) FROM "+table.Name).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})
	stop()
	wg.Wait()
	if totals[0]+totals[1] != keys*rounds {
		t.Fatalf("the appliers took %d and %d requests; want %d in all, each once", totals[0], totals[1], keys*rounds)
	}
	for k := range keys {
		tm, err := timers.Timer(t.Context(), fmt.Sprintf("k%d", k))
		last := rounds - 1
		wantArmed := (last+k)%2 == 0
		if err != nil || (tm.Status == hourglass.TimerScheduled) != wantArmed {
			t.Errorf("k%d = %s, %v; want armed %v (its last request)", k, tm.Status, err, wantArmed)
		}
	}
	t.Logf("applier a took %d requests, b %d", totals[0], totals[1])
}

func requestNotified(t *testing.T, h TimerRequestHarness) {
	a, _, _, shop, table := h.Open(t)
	ch := a.TimerRequestsWritten()
	if ch == nil {
		t.Skip("the store cannot tell when requests were written: the applier polls")
	}
	for len(ch) > 0 {
		<-ch
	}
	inTx(t, shop, true, func(tx *sql.Tx) error {
		return table.Arm(t.Context(), tx, txtimer.Arm{Key: "quiet", Delay: time.Minute})
	})
	select {
	case <-ch:
		t.Fatal("notified of a rolled-back request")
	case <-time.After(300 * time.Millisecond):
	}
	inTx(t, shop, false, func(tx *sql.Tx) error {
		return table.Arm(t.Context(), tx, txtimer.Arm{Key: "loud", Delay: time.Minute})
	})
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("not notified 10 s after a committed request")
	}
}

// requestRejectedPruned: rejected requests are pruned by their rejection
// time, oldest first, up to the limit.
func requestRejectedPruned(t *testing.T, h TimerRequestHarness) {
	a, _, _, shop, table := h.Open(t)
	for _, key := range []string{"bad one", "bad two"} {
		inTx(t, shop, false, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(t.Context(), "INSERT INTO "+table.Name+" (timer_key, delay_ms) VALUES ('"+key+"', 1000)")
			return err
		})
	}
	if res := applyAll(t, a); res.Rejected != 2 {
		t.Fatalf("applied %+v; want both rejected", res)
	}
	if n, err := a.PruneRejectedTimerRequests(t.Context(), time.Now().Add(-time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("PruneRejectedTimerRequests(an hour ago) = %d, %v; want 0", n, err)
	}
	if n, err := a.PruneRejectedTimerRequests(t.Context(), time.Now().Add(time.Hour), 1); err != nil || n != 1 {
		t.Fatalf("PruneRejectedTimerRequests(limit 1) = %d, %v; want 1", n, err)
	}
	left, err := a.RejectedTimerRequests(t.Context(), 0, 10)
	if err != nil || len(left) != 1 || left[0].Key == nil || *left[0].Key != "bad two" {
		t.Fatalf("after pruning one: %+v, %v; want the newer, bad two", left, err)
	}
}

// shopInsert returns the shop's hand-written INSERT into the request table
// of the columns named, with placeholders in the shop's dialect, and a
// prefix before VALUES (PostgreSQL's OVERRIDING SYSTEM VALUE).
func shopInsert(table txtimer.Table, columns []string, beforeValues string) string {
	marks := make([]string, len(columns))
	for i := range marks {
		marks[i] = "?"
		if table.Dialect == txtimer.Postgres {
			marks[i] = fmt.Sprintf("$%d", i+1)
		}
	}
	return fmt.Sprintf("INSERT INTO %s (%s) %s VALUES (%s)", table.Name, strings.Join(columns, ", "), beforeValues, strings.Join(marks, ", "))
}

// requestAPIRules: a request keeps every rule PUT /v1/timers/{key} keeps
// (issue 37: these were armed and relayed): a payload with a NUL, an
// unpaired surrogate escape or a key given twice, and a webhook_id of a
// webhook not subscribed to timer.fired, are rejected with the API's
// reason; a webhook subscribed to timer.fired is taken.
func requestAPIRules(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	hooks, ok := a.(interface {
		CreateWebhook(ctx context.Context, p hourglass.WebhookParams, limit int) (hourglass.Webhook, error)
	})
	if !ok {
		t.Skip("the store keeps no webhooks")
	}
	closed, err := hooks.CreateWebhook(t.Context(), hourglass.WebhookParams{URL: "https://shop.example/closed", Events: []hourglass.EventType{hourglass.EventOrderClosed}, Secret: strings.Repeat("s", 32)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	fired, err := hooks.CreateWebhook(t.Context(), hourglass.WebhookParams{URL: "https://shop.example/timers", Events: []hourglass.EventType{hourglass.EventTimerFired}, Secret: strings.Repeat("s", 32)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	cols := []string{"timer_key", "delay_ms", "payload", "webhook_id"}
	want := []struct {
		key     string
		payload any
		hook    any
		reason  string // "" for applied
	}{
		{"nul", `{"a":"x\u0000y"}`, nil, "payload.a: must be valid UTF-8 without NUL"},
		{"surrogate", `{"a":"\ud800"}`, nil, "unpaired UTF-16 surrogate"},
		{"twice", `{"a":1,"a":2}`, nil, "payload.a: given more than once"},
		{"nested-twice", `{"a":{"b":1,"b":2}}`, nil, "payload.a.b: given more than once"},
		{"minus-zero", `{"a":-0}`, nil, "negative zero"},
		{"closed-hook", nil, closed.ID, "is not subscribed to timer.fired"},
		{"fired-hook", `{"a":"\ud83d\ude00"}`, fired.ID, ""},
	}
	inTx(t, shop, false, func(tx *sql.Tx) error {
		for _, w := range want {
			if _, err := tx.ExecContext(t.Context(), shopInsert(table, cols, ""), w.key, 60000, w.payload, w.hook); err != nil {
				return err
			}
		}
		return nil
	})
	res := applyAll(t, a)
	if res.Applied != 1 || res.Rejected != len(want)-1 {
		t.Fatalf("applied %+v; want 1 applied, %d rejected", res, len(want)-1)
	}
	rej, err := a.RejectedTimerRequests(t.Context(), 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, r := range rej {
		if r.Key != nil {
			reasons[*r.Key] = r.Reason
		}
	}
	for _, w := range want {
		if w.reason == "" {
			if tm, err := timers.Timer(t.Context(), w.key); err != nil || tm.WebhookID != fired.ID {
				t.Errorf("%s: timer %+v, %v; want it armed for webhook %d", w.key, tm, err, fired.ID)
			}
			continue
		}
		if !strings.Contains(reasons[w.key], w.reason) {
			t.Errorf("%s: rejected with %q; want a reason with %q", w.key, reasons[w.key], w.reason)
		}
		if _, err := timers.Timer(t.Context(), w.key); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
			t.Errorf("%s: Timer = %v; want not_found", w.key, err)
		}
	}
}

// requestSizes: a payload and a key far over their bounds are rejected by
// their size, which the database reads (the bytes never reach the
// process), and the rejected list shows at most the first KiB of each with
// the payload's size; the request beside them is applied.
func requestSizes(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	big := `{"a":"` + strings.Repeat("é", 1<<20) + `"}` // 2 MiB and 8 bytes
	long := strings.Repeat("k", 60_000)                 // MySQL's TEXT holds 65,535 bytes
	cols := []string{"timer_key", "delay_ms", "payload"}
	inTx(t, shop, false, func(tx *sql.Tx) error {
		for _, r := range [][]any{{"big", 1000, big}, {long, 1000, nil}, {"edge", 1000, `{"a":"` + strings.Repeat("x", hourglass.MaxTimerPayload-8) + `"}`}} {
			if _, err := tx.ExecContext(t.Context(), shopInsert(table, cols, ""), r...); err != nil {
				return err
			}
		}
		return nil
	})
	res := applyAll(t, a)
	if res.Applied != 1 || res.Rejected != 2 {
		t.Fatalf("applied %+v; want 1 applied (the 64 KiB payload), 2 rejected", res)
	}
	if _, err := timers.Timer(t.Context(), "edge"); err != nil {
		t.Errorf("a payload of exactly %d bytes: %v", hourglass.MaxTimerPayload, err)
	}
	rej, err := a.RejectedTimerRequests(t.Context(), 0, 10)
	if err != nil || len(rej) != 2 {
		t.Fatalf("RejectedTimerRequests = %d, %v; want 2", len(rej), err)
	}
	if r := rej[0]; r.Reason != fmt.Sprintf("payload: at most %d bytes, got %d", hourglass.MaxTimerPayload, len(big)) ||
		r.Payload == nil || len(*r.Payload) > hourglass.RejectedTextMax || len(*r.Payload) < hourglass.RejectedTextMax-1 ||
		!strings.HasPrefix(big, *r.Payload) || r.PayloadBytes != int64(len(big)) {
		t.Errorf("rejected payload: reason %q, %d bytes shown of %d; want its size named, its first KiB and its size", r.Reason, len(*r.Payload), r.PayloadBytes)
	}
	if r := rej[1]; !strings.Contains(r.Reason, "timer_key: must be 1 to 200 characters, got 60000 bytes") || r.Key == nil || len(*r.Key) != hourglass.RejectedTextMax {
		t.Errorf("rejected key: reason %q; want its size named, and its first KiB listed", r.Reason)
	}
}

// requestTimerMax: an applier with room for 2 new timers (--timer-max)
// creates 2 and rejects the other new keys with PUT's 409 reason; a re-arm
// of an existing timer is never refused. new-2 is armed twice alike: the
// second arm changes nothing (on PostgreSQL it failed the batch, every
// time: its rounds did not see the first's timer).
func requestTimerMax(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	inTx(t, shop, false, func(tx *sql.Tx) error {
		return table.Arm(t.Context(), tx, txtimer.Arm{Key: "old", Delay: time.Hour})
	})
	applyAll(t, a)
	inTx(t, shop, false, func(tx *sql.Tx) error {
		for _, k := range []string{"new-1", "old", "new-2", "new-2", "new-3", "new-4"} {
			if err := table.Arm(t.Context(), tx, txtimer.Arm{Key: k, Delay: time.Hour}); err != nil {
				return err
			}
		}
		return nil
	})
	res, err := a.ApplyTimerRequests(t.Context(), hourglass.TimerRequestsParams{Limit: 100, Room: 2, Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	if res.Applied != 4 || res.Rejected != 2 || res.Created != 2 {
		t.Fatalf("applied %+v; want 4 applied (2 created, a re-arm, new-2 armed again), 2 rejected", res)
	}
	for _, k := range []string{"new-1", "old", "new-2"} {
		if _, err := timers.Timer(t.Context(), k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	rej, err := a.RejectedTimerRequests(t.Context(), 0, 10)
	if err != nil || len(rej) != 2 {
		t.Fatalf("RejectedTimerRequests = %+v, %v; want 2", rej, err)
	}
	for _, r := range rej {
		if !strings.Contains(r.Reason, "5 timers exist, the most allowed (--timer-max)") {
			t.Errorf("rejected %v: %q; want the --timer-max reason", *r.Key, r.Reason)
		}
	}
}

// requestRequestedAtFuture: a requested_at far in the future (the shop's
// to write) counts as the database's now: delay_ms 0 fires now, not in
// the year 9999.
func requestRequestedAtFuture(t *testing.T, h TimerRequestHarness) {
	a, _, timers, shop, table := h.Open(t)
	far := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	var at any = far
	if table.Dialect == txtimer.MySQL {
		at = far.Format("2006-01-02 15:04:05.000")
	}
	before := time.Now()
	_, err := shop.ExecContext(t.Context(), shopInsert(table, []string{"timer_key", "delay_ms", "requested_at"}, ""), "later", 0, at)
	if err != nil {
		t.Fatal(err)
	}
	if res := applyAll(t, a); res.Applied != 1 {
		t.Fatalf("applied %+v; want 1", res)
	}
	tm, err := timers.Timer(t.Context(), "later")
	if err != nil {
		t.Fatal(err)
	}
	if tm.FireAt.After(time.Now().Add(time.Minute)) || tm.FireAt.Before(before.Add(-time.Minute)) {
		t.Fatalf("fire_at %s; want now (a requested_at of %s counts as now)", tm.FireAt, far)
	}
}

// requestExplicitSeq: a shop's INSERT that names seq (at the int64 maximum,
// and at the next values the counter would hand out) breaks nothing for
// the others: their INSERTs still succeed and every request is applied in
// the order written. On MariaDB the maximum made every later INSERT fail
// (error 167) until an ALTER TABLE; on PostgreSQL (OVERRIDING SYSTEM
// VALUE) the next values made later INSERTs fail with a duplicate key.
func requestExplicitSeq(t *testing.T, h TimerRequestHarness) {
	if !h.OwnColumns {
		t.Skip("the store does not own seq (SQLite: the file's writers are trusted processes)")
	}
	a, _, timers, shop, table := h.Open(t)
	arm := func(key string) {
		inTx(t, shop, false, func(tx *sql.Tx) error {
			return table.Arm(t.Context(), tx, txtimer.Arm{Key: key, Delay: time.Hour})
		})
	}
	arm("first")
	override := ""
	if table.Dialect == txtimer.Postgres {
		override = "OVERRIDING SYSTEM VALUE"
	}
	for i, seq := range []int64{2, 3, 4, 9223372036854775807} {
		if _, err := shop.ExecContext(t.Context(), shopInsert(table, []string{"seq", "timer_key", "delay_ms", "requested_at"}, override), seq, fmt.Sprintf("explicit-%d", i), 1000, "2000-01-01 00:00:00"); err != nil {
			t.Fatalf("the shop's INSERT naming seq %d: %v", seq, err)
		}
	}
	for i := range 5 {
		arm(fmt.Sprintf("after-%d", i))
	}
	res := applyAll(t, a)
	if res.Applied != 10 || res.Rejected != 0 {
		t.Fatalf("applied %+v; want all 10", res)
	}
	for i := range 4 {
		tm, err := timers.Timer(t.Context(), fmt.Sprintf("explicit-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		// requested_at is the database's, not the shop's year 2000.
		if tm.FireAt.Before(time.Now().Add(-time.Minute)) {
			t.Errorf("explicit-%d fires at %s; want a second after its INSERT", i, tm.FireAt)
		}
	}
}

// requestLargeValues: 16 requests of 10 MB payloads, written by the
// database itself (the shop sends a few bytes), are rejected, and listed,
// with the process allocating a small part of one of them: their bytes
// never reach it (issue 37: 50 rows of 20 MB took a node from 34 MB to
// 1.76 GB of RSS, and each listing read them whole again).
func requestLargeValues(t *testing.T, h TimerRequestHarness) {
	a, _, _, shop, table := h.Open(t)
	const rows, size = 16, 10 << 20
	// The database's own repeat: PostgreSQL's and MySQL's repeat(), SQLite's
	// printf('%.*c').
	value := fmt.Sprintf(`repeat('x', %d)`, size)
	if _, err := shop.ExecContext(t.Context(), `SELECT sqlite_version()`); err == nil {
		value = fmt.Sprintf(`printf('%%.*c', %d, 'x')`, size)
	}
	for i := range rows {
		q := fmt.Sprintf(`INSERT INTO %s (timer_key, delay_ms, payload) VALUES ('big-%d', 1000, %s)`, table.Name, i, value)
		if _, err := shop.ExecContext(t.Context(), q); err != nil {
			t.Fatal(err)
		}
	}
	var res hourglass.TimerRequestsApplied
	var rej []hourglass.RejectedTimerRequest
	alloc := allocatedBy(func() {
		res = applyAll(t, a)
		var err error
		if rej, err = a.RejectedTimerRequests(t.Context(), 0, 100); err != nil {
			t.Fatal(err)
		}
	})
	if res.Rejected != rows || len(rej) != rows {
		t.Fatalf("applied %+v, listed %d; want %d rejected and listed", res, len(rej), rows)
	}
	for _, r := range rej {
		if r.PayloadBytes != size || r.Payload == nil || len(*r.Payload) != hourglass.RejectedTextMax {
			t.Fatalf("listed %v: %d bytes of %d; want the first %d of %d", *r.Key, len(*r.Payload), r.PayloadBytes, hourglass.RejectedTextMax, size)
		}
	}
	// The process's other work allocates too (heartbeats, listeners, and
	// the package's parallel tests: 33 MB once in CI under -race), where
	// reading the payloads would allocate 320 MB.
	if alloc > 100<<20 {
		t.Fatalf("applying and listing %d payloads of %d MB allocated %d MB; want them never read", rows, size>>20, alloc>>20)
	}
	t.Logf("applying and listing %d payloads of %d MB allocated %.1f MB", rows, size>>20, float64(alloc)/(1<<20))
}

// allocatedBy returns the bytes the process allocated while fn ran.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
