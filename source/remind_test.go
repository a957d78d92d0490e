package source_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/source"
)

// reminderBody is a source.expiring event's body, its times parsed.
type reminderBody struct {
	ID, Type, Source              string
	Key                           int64
	CreatedAt, Deadline, RemindAt time.Time
	raw                           []byte
}

// reminders returns the source.expiring events of the row key of source
// shop_orders, oldest first, with their bodies parsed.
func reminders(t *testing.T, db hourglasstest.SourceDB, key int64) []reminderBody {
	t.Helper()
	evs, err := db.OrderEvents(t.Context(), hourglass.SourceEventOrderID("shop_orders", key))
	if err != nil {
		t.Fatal(err)
	}
	var out []reminderBody
	for _, e := range evs {
		if e.Type != hourglass.EventSourceExpiring {
			continue
		}
		var raw struct {
			ID        string `json:"id"`
			Type      string `json:"type"`
			CreatedAt string `json:"created_at"`
			Source    string `json:"source"`
			Key       int64  `json:"key"`
			Deadline  string `json:"deadline"`
			RemindAt  string `json:"remind_at"`
		}
		if err := json.Unmarshal(e.Body, &raw); err != nil {
			t.Fatalf("event %s: body %s: %v", e.ID, e.Body, err)
		}
		b := reminderBody{ID: raw.ID, Type: raw.Type, Source: raw.Source, Key: raw.Key, raw: e.Body}
		for _, f := range []struct {
			s  string
			to *time.Time
		}{{raw.CreatedAt, &b.CreatedAt}, {raw.Deadline, &b.Deadline}, {raw.RemindAt, &b.RemindAt}} {
			if *f.to, err = time.Parse(time.RFC3339Nano, f.s); err != nil {
				t.Fatalf("event %s: body %s: %v", e.ID, e.Body, err)
			}
		}
		if b.ID != e.ID || !b.CreatedAt.Equal(e.CreatedAt) {
			t.Errorf("event %s at %s: body %s names another", e.ID, e.CreatedAt, e.Body)
		}
		out = append(out, b)
	}
	return out
}

// remindingSource is the shop's orders as a source with reminders lead
// before each deadline.
func remindingSource(shop hourglasstest.Shop, lead time.Duration) hourglass.Source {
	src := shop.Source("shop_orders")
	src.RemindBefore = lead
	return src
}

// start runs the sources of cfg until stop (or the test's end), waiting
// for Ready.
func start(t *testing.T, cfg source.Config) (stop func()) {
	t.Helper()
	r, _, err := source.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	select {
	case <-r.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the sources were not ready within 10 s")
	}
	return stop
}

// extend moves a pending order's deadline by d, as the shop would.
func extend(t *testing.T, shop hourglasstest.Shop, id int64, d time.Duration) {
	t.Helper()
	if shop.Exec(t, "UPDATE "+shop.T("orders")+" SET expire_at = expire_at + "+msInterval(shop, int(d.Milliseconds()))+" WHERE id = ? AND status = 'UNPAID'", id) != 1 {
		t.Fatalf("order %d: not extended (no longer pending?)", id)
	}
}

// msInterval is ms milliseconds as the shop's SQL adds them to a
// timestamp.
func msInterval(shop hourglasstest.Shop, ms int) string {
	if shop.Postgres {
		return fmt.Sprintf("interval '%d milliseconds'", ms)
	}
	return fmt.Sprintf("INTERVAL %d MICROSECOND", ms*1000)
}

// checkOnTime fails unless b was written at or after its remind_at (by
// the database's clock), for the deadline want (rounded to the
// millisecond as the body writes it), lead before it.
func checkOnTime(t *testing.T, b reminderBody, key int64, want time.Time, lead time.Duration) {
	t.Helper()
	if b.Type != "source.expiring" || b.Source != "shop_orders" || b.Key != key || !strings.HasPrefix(b.ID, "evt_") {
		t.Errorf("row %d: reminder body %s", key, b.raw)
	}
	if d := b.Deadline.Sub(want); d < -time.Millisecond || d > time.Millisecond {
		t.Errorf("row %d: reminder for the deadline %s; want %s", key, b.Deadline.Format(hourglass.TimeFormat), want.UTC().Format(hourglass.TimeFormat))
	}
	if got := b.Deadline.Sub(b.RemindAt); got != lead {
		t.Errorf("row %d: remind_at %s is %s before the deadline %s; want %s", key, b.RemindAt, got, b.Deadline, lead)
	}
	if b.CreatedAt.Before(b.RemindAt) {
		t.Errorf("row %d: reminder written at %s, before its remind_at %s", key, b.CreatedAt.Format(hourglass.TimeFormat), b.RemindAt.Format(hourglass.TimeFormat))
	}
}

// deadline reads an order's deadline from the shop's table.
func deadline(t *testing.T, shop hourglasstest.Shop, id int64) time.Time {
	t.Helper()
	var v any
	if err := shop.DB.QueryRowContext(t.Context(), shop.Bind("SELECT expire_at FROM "+shop.T("orders")+" WHERE id = ?"), id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	at, ok := v.(time.Time)
	if b, isText := v.([]byte); isText { // MySQL without parseTime
		var err error
		if at, err = time.ParseInLocation("2006-01-02 15:04:05.999999", string(b), time.UTC); err != nil {
			t.Fatal(err)
		}
		ok = true
	}
	if !ok {
		t.Fatalf("expire_at read as %T", v)
	}
	return hourglass.CeilMilli(at.UTC())
}

// TestSourceReminderSent: a row's reminder is written at remind_at (not
// before, by the database's clock) with its body, and delivered to the
// webhooks subscribed to source.expiring (and "*"), not to one subscribed
// to source.closed only.
func TestSourceReminderSent(t *testing.T) {
	const lead = time.Second
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	// The body's schema only: a webhooks entry for source.expiring waits
	// for api's TestOpenAPI to exempt it as it does source.closed (a
	// source needs PostgreSQL or MySQL; that test runs on SQLite).
	ref := doc.Components.Schemas["SourceReminderEvent"]
	if ref == nil || ref.Value == nil {
		t.Fatal("the OpenAPI document has no SourceReminderEvent schema")
	}
	schema := ref.Value
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 10)
			ctx := t.Context()
			hook := func(types ...hourglass.EventType) int64 {
				h, err := db.CreateWebhook(ctx, hourglass.WebhookParams{URL: "https://example.com/h", Events: types, Secret: strings.Repeat("s", 16)}, 0)
				if err != nil {
					t.Fatal(err)
				}
				return h.ID
			}
			expiring, all, closed := hook(hourglass.EventSourceExpiring), hook(hourglass.EventTypeAll), hook(hourglass.EventSourceClosed)
			obs := &observer{}
			start(t, source.Config{Store: db, Sources: []hourglass.Source{remindingSource(shop, lead)}, Observer: obs})
			id := shop.Order(t, "u", 2*time.Second, "A", 1)
			due := deadline(t, shop, id)
			// Not before its time: none while remind_at is ahead.
			testenv.Until(ctx, due.Add(-lead-200*time.Millisecond))
			if got := reminders(t, db, id); len(got) != 0 {
				t.Fatalf("a reminder %s before its remind_at %s", got[0].raw, due.Add(-lead))
			}
			var got []reminderBody
			testenv.Eventually(t, 10*time.Second, "the reminder", func() bool { got = reminders(t, db, id); return len(got) > 0 })
			if len(got) != 1 {
				t.Fatalf("%d reminders; want one", len(got))
			}
			checkOnTime(t, got[0], id, due, lead)
			var body any
			if err := json.Unmarshal(got[0].raw, &body); err != nil {
				t.Fatal(err)
			}
			if err := schema.VisitJSON(body, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("the body breaks the OpenAPI document: %v\n%s", err, got[0].raw)
			}
			t.Logf("%s: reminder written %s after its remind_at", name, got[0].CreatedAt.Sub(got[0].RemindAt))
			// Counted once Remind returned, just after its commit.
			testenv.Eventually(t, 5*time.Second, "the reminder counted", func() bool { sent, _ := obs.reminded(); return sent > 0 })
			if sent, skipped := obs.reminded(); sent != 1 || skipped != 0 {
				t.Errorf("counted %d sent, %d skipped; want 1 and 0", sent, skipped)
			}
			dl, err := db.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: time.Now().Add(time.Hour), Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			hooks := map[int64]int{}
			for _, d := range dl {
				pd, err := db.PendingDelivery(ctx, d.ID)
				if err != nil {
					t.Fatal(err)
				}
				if pd.EventType == hourglass.EventSourceExpiring {
					hooks[pd.WebhookID]++
					if string(pd.Body) != string(got[0].raw) || pd.EventID != got[0].ID {
						t.Errorf("delivery %d: event %s body %s; want %s", pd.ID, pd.EventID, pd.Body, got[0].raw)
					}
				}
			}
			if hooks[expiring] != 1 || hooks[all] != 1 || hooks[closed] != 0 || len(hooks) != 2 {
				t.Errorf("source.expiring deliveries by webhook %v; want one to %d (source.expiring) and %d (*), none to %d (source.closed)", hooks, expiring, all, closed)
			}
			// The row still closes at its deadline, with its own event.
			testenv.Eventually(t, 10*time.Second, "the close", func() bool { return shop.Status(t, id) == "CLOSED" })
			if got := reminders(t, db, id); len(got) != 1 {
				t.Errorf("%d reminders after the close; want one", len(got))
			}
		})
	}
}

// TestSourceReminderNotPending: a row paid or cancelled before its
// remind_at gets no reminder (counted skipped); a third row beside them
// gets its own.
func TestSourceReminderNotPending(t *testing.T) {
	const lead = time.Second
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 10)
			obs := &observer{}
			start(t, source.Config{Store: db, Sources: []hourglass.Source{remindingSource(shop, lead)}, Observer: obs, TailInterval: 50 * time.Millisecond})
			paid := shop.Order(t, "u", 2500*time.Millisecond, "A", 1)
			cancelled := shop.Order(t, "u", 2500*time.Millisecond, "A", 1)
			kept := shop.Order(t, "u", 2500*time.Millisecond, "A", 1)
			// Paid and cancelled once the tail has armed their reminders,
			// before those fall due (1.5 s after they were created).
			testenv.Until(t.Context(), time.Now().Add(700*time.Millisecond))
			if ok, err := shop.Pay(t, paid); !ok || err != nil {
				t.Fatalf("pay: %v, %v", ok, err)
			}
			shop.Exec(t, "UPDATE "+shop.T("orders")+" SET status = 'CANCELLED' WHERE id = ?", cancelled)
			testenv.Eventually(t, 10*time.Second, "the kept row's reminder and two skipped", func() bool {
				sent, skipped := obs.reminded()
				return sent == 1 && skipped == 2
			})
			for _, id := range []int64{paid, cancelled} {
				if got := reminders(t, db, id); len(got) != 0 {
					t.Errorf("row %d, no longer pending before its remind_at: reminder %s", id, got[0].raw)
				}
			}
			if got := reminders(t, db, kept); len(got) != 1 {
				t.Errorf("the pending row: %d reminders; want one", len(got))
			}
		})
	}
}

// TestSourceReminderMoved: a deadline the shop moves later after its
// reminder gets one more for the new deadline when that reminder time is
// still ahead, none when it passed already; one moved before its reminder
// gets exactly one, at the new time.
func TestSourceReminderMoved(t *testing.T) {
	const lead = time.Second
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 10)
			obs := &observer{}
			start(t, source.Config{Store: db, Sources: []hourglass.Source{remindingSource(shop, lead)}, Observer: obs})
			after := shop.Order(t, "u", 2*time.Second, "A", 1)     // reminded, then moved 3 s later
			afterLate := shop.Order(t, "u", 2*time.Second, "A", 1) // reminded, then moved 200 ms: its new time passed
			before := shop.Order(t, "u", 3*time.Second, "A", 1)    // moved 2 s later before its reminder
			first, firstLate, moved := deadline(t, shop, after), deadline(t, shop, afterLate), deadline(t, shop, before)

			extend(t, shop, before, 2*time.Second)
			testenv.Eventually(t, 10*time.Second, "the first reminders", func() bool {
				return len(reminders(t, db, after)) == 1 && len(reminders(t, db, afterLate)) == 1
			})
			// Half a second before their deadline: afterLate's new remind_at
			// (200 ms after its first) has passed when it moves.
			testenv.Until(t.Context(), firstLate.Add(-500*time.Millisecond))
			extend(t, shop, after, 3*time.Second)
			extend(t, shop, afterLate, 200*time.Millisecond)
			testenv.Eventually(t, 15*time.Second, "the moved rows closed", func() bool {
				return shop.Status(t, after) == "CLOSED" && shop.Status(t, afterLate) == "CLOSED" && shop.Status(t, before) == "CLOSED"
			})
			got := reminders(t, db, after)
			if len(got) != 2 {
				t.Fatalf("moved after its reminder, new time ahead: %d reminders; want 2", len(got))
			}
			checkOnTime(t, got[0], after, first, lead)
			checkOnTime(t, got[1], after, first.Add(3*time.Second), lead)
			if got := reminders(t, db, afterLate); len(got) != 1 {
				t.Errorf("moved after its reminder, new time passed: %d reminders; want 1", len(got))
			} else {
				checkOnTime(t, got[0], afterLate, firstLate, lead)
			}
			got = reminders(t, db, before)
			if len(got) != 1 {
				t.Fatalf("moved before its reminder: %d reminders; want 1", len(got))
			}
			checkOnTime(t, got[0], before, moved.Add(2*time.Second), lead)
		})
	}
}

// TestSourceReminderOnce: two runners on one database (two nodes owning
// every row, or one node and its restart) write one reminder per (source,
// key, deadline); Remind called again for a reminder settled, for a
// deadline that moved, and for a row the shop holds locked changes
// nothing.
func TestSourceReminderOnce(t *testing.T) {
	const lead = time.Second
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 1000)
			src := remindingSource(shop, lead)
			a, b := &observer{}, &observer{}
			stopA := start(t, source.Config{Store: db, Sources: []hourglass.Source{src}, Observer: a})
			stopB := start(t, source.Config{Store: db, Sources: []hourglass.Source{src}, Observer: b})
			const n = 40
			ids := make([]int64, n)
			for i := range ids {
				ids[i] = shop.Order(t, "u", 2*time.Second+time.Duration(i)*10*time.Millisecond, "A", 1)
			}
			testenv.Eventually(t, 15*time.Second, "every row closed", func() bool {
				var left int
				shop.DB.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+shop.T("orders")+" WHERE status = 'UNPAID'").Scan(&left)
				return left == 0
			})
			var late []time.Duration
			for _, id := range ids {
				got := reminders(t, db, id)
				if len(got) != 1 {
					t.Errorf("row %d: %d reminders from two runners; want 1", id, len(got))
					continue
				}
				if got[0].CreatedAt.Before(got[0].RemindAt) {
					t.Errorf("row %d: reminded at %s, before its remind_at %s", id, got[0].CreatedAt, got[0].RemindAt)
				}
				late = append(late, got[0].CreatedAt.Sub(got[0].RemindAt))
			}
			if len(late) > 0 {
				slices.Sort(late)
				p99 := late[min(len(late)*99/100, len(late)-1)]
				t.Logf("%s: %d reminders from two runners, lateness p50 %s p99 %s max %s", name, len(late), late[len(late)/2], p99, late[len(late)-1])
				// Tells late from lost; the two runners contend for each row.
				if p99 > time.Second && !raceEnabled {
					t.Errorf("reminder lateness p99 %s; want under 1 s", p99)
				}
			}
			sa, ka := a.reminded()
			sb, kb := b.reminded()
			if sa+sb != n || ka+kb != 0 {
				t.Errorf("runners counted %d+%d sent, %d+%d skipped; want %d sent between them", sa, sb, ka, kb, n)
			}

			// Remind itself, as a retry or another node would call it,
			// with the runners stopped: they would send the reminder of
			// the row moved within its lead below before these calls do
			// on a loaded machine (Remind #1 then answers Done).
			stopA()
			stopB()
			tbl, _, err := db.OpenSource(t.Context(), src)
			if err != nil {
				t.Fatal(err)
			}
			id := shop.Order(t, "u", time.Hour, "A", 1)
			due := deadline(t, shop, id)
			res, err := tbl.Remind(t.Context(), []hourglass.DueItem{{ID: id, At: due}})
			if err != nil || len(res) != 1 || res[0].Outcome != hourglass.SourceReminderNotDue {
				t.Fatalf("Remind an hour early = %+v, %v; want not due", res, err)
			}
			// A reminder is due at remind_at: make it so by moving the
			// deadline within the lead, as late in it as can be (the calls
			// below must come before the deadline, or the reminder is
			// skipped).
			shop.Exec(t, "UPDATE "+shop.T("orders")+" SET expire_at = "+shop.Now()+" + "+msInterval(shop, int(lead.Milliseconds())-100)+" WHERE id = ?", id)
			due = deadline(t, shop, id)
			res, err = tbl.Remind(t.Context(), []hourglass.DueItem{{ID: id, At: due.Add(time.Hour)}})
			if err != nil || len(res) != 1 || res[0].Outcome != hourglass.SourceReminderMoved || !res[0].Deadline.Equal(due) {
				t.Fatalf("Remind for the old deadline = %+v, %v; want moved to %s", res, err, due)
			}
			for i, want := range []hourglass.SourceRemindOutcome{hourglass.SourceReminderSent, hourglass.SourceReminderDone} {
				res, err = tbl.Remind(t.Context(), []hourglass.DueItem{{ID: id, At: due}})
				if err != nil || len(res) != 1 || res[0].Outcome != want {
					t.Fatalf("Remind #%d = %+v, %v; want outcome %d", i+1, res, err, want)
				}
			}
			if got := reminders(t, db, id); len(got) != 1 {
				t.Errorf("%d reminders after Remind twice; want 1", len(got))
			}
			// A row the shop holds is not waited for (due in an hour: the
			// runners leave it alone).
			other := shop.Order(t, "u", time.Hour, "A", 1)
			tx, err := shop.DB.BeginTx(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(t.Context(), shop.Bind("UPDATE "+shop.T("orders")+" SET user_id = 'v' WHERE id = ?"), other); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			res, err = tbl.Remind(t.Context(), []hourglass.DueItem{{ID: other, At: deadline(t, shop, other)}})
			if err != nil || len(res) != 1 || res[0].Outcome != hourglass.SourceReminderBlocked || time.Since(began) > 2*time.Second {
				t.Fatalf("Remind of a row the shop holds = %+v, %v after %s; want blocked at once", res, err, time.Since(began))
			}
			if pruned, err := tbl.PruneReminders(t.Context(), time.Now().Add(24*time.Hour), 1000); err != nil || pruned < n+1 {
				t.Errorf("PruneReminders = %d, %v; want at least the %d settled", pruned, err, n+1)
			}
		})
	}
}

// TestSourceReminderRestart: a reminder whose time passed while no
// runner ran is sent at start if the row's deadline is still ahead, and
// counted skipped (no event) if it passed too; one sent before a restart
// is not sent again by the next runner.
func TestSourceReminderRestart(t *testing.T) {
	const lead = 2 * time.Second
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 10)
			src := remindingSource(shop, lead)

			// Before the restart: a row reminded by the first runner.
			obs := &observer{}
			stop := start(t, source.Config{Store: db, Sources: []hourglass.Source{src}, Observer: obs})
			sentBefore := shop.Order(t, "u", 3*time.Second, "A", 1)
			testenv.Eventually(t, 10*time.Second, "the first runner's reminder", func() bool { return len(reminders(t, db, sentBefore)) == 1 })
			stop()

			// While down: one row's remind_at passes with its deadline
			// ahead; another's deadline passes too.
			ahead := shop.Order(t, "u", 3500*time.Millisecond, "A", 1)
			passed := shop.Order(t, "u", 1500*time.Millisecond, "A", 1)
			far := shop.Order(t, "u", time.Hour, "A", 1)
			testenv.Until(t.Context(), deadline(t, shop, passed).Add(200*time.Millisecond))
			if time.Until(deadline(t, shop, ahead)) < time.Second {
				t.Skip("the machine is too slow for this test's timing")
			}
			obs2 := &observer{}
			start(t, source.Config{Store: db, Sources: []hourglass.Source{src}, Observer: obs2})
			testenv.Eventually(t, 10*time.Second, "one sent and one skipped at start", func() bool {
				sent, skipped := obs2.reminded()
				return sent == 1 && skipped == 1
			})
			got := reminders(t, db, ahead)
			if len(got) != 1 {
				t.Fatalf("the row whose deadline is ahead: %d reminders; want 1", len(got))
			}
			checkOnTime(t, got[0], ahead, deadline(t, shop, ahead), lead)
			if !got[0].CreatedAt.Before(got[0].Deadline) {
				t.Errorf("reminder written at %s, not before its deadline %s", got[0].CreatedAt, got[0].Deadline)
			}
			if got := reminders(t, db, passed); len(got) != 0 {
				t.Errorf("the row whose deadline passed while down got a reminder %s", got[0].raw)
			}
			testenv.Eventually(t, 10*time.Second, "the rows due closed", func() bool {
				return shop.Status(t, sentBefore) == "CLOSED" && shop.Status(t, ahead) == "CLOSED" && shop.Status(t, passed) == "CLOSED"
			})
			if got := reminders(t, db, sentBefore); len(got) != 1 {
				t.Errorf("the row reminded before the restart: %d reminders; want 1", len(got))
			}
			if got := reminders(t, db, far); len(got) != 0 {
				t.Errorf("the row due in an hour got a reminder %s", got[0].raw)
			}
			sent, skipped := obs2.reminded()
			if sent != 1 || skipped != 1 {
				t.Errorf("after the restart: %d sent, %d skipped; want 1 and 1", sent, skipped)
			}
		})
	}
}
