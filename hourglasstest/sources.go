package hourglasstest

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// SourceDB is a store that can close a shop's rows.
type SourceDB interface {
	hourglass.Database
	hourglass.SourceStore
}

// SourceHarness tells ExerciseSources how to get stores and the shop.
type SourceHarness struct {
	// Open returns two store values on one new database (two nodes) and
	// the shop's connection with a schema name of its own, not created
	// yet. The harness closes them in t.Cleanup.
	Open func(t *testing.T) (a, b SourceDB, shop Shop)
	// LocksElsewhere says the shop's row locks are not the stores' to
	// see: on Galera the shop's transaction runs on another node, whose
	// locks are its own (the loser fails certification at commit), so the
	// locked-row cases do not apply.
	LocksElsewhere bool
}

// ExerciseSources runs the conformance suite of hourglass.SourceStore on
// the shop's schema: the start-up checks and index warnings, the reads, a
// close's outcomes (closed with its event and deliveries, a no-op, a
// guard that matches several rows, a statement that fails) and exactly
// one close per row from two store values racing.
func ExerciseSources(t *testing.T, h SourceHarness) {
	testenv.RequireDefault(t)
	for _, c := range []struct {
		name string
		run  func(*testing.T, SourceHarness)
	}{
		{"Refusals", sourceRefusals},
		{"MissingIndexWarning", sourceIndexWarning},
		{"Reads", sourceReads},
		{"Close", sourceClose},
		{"GuardMatchesSeveral", sourceGuardSeveral},
		{"StatementFails", sourceStatementFails},
		{"TwoStoresCloseOnce", sourceTwoStores},
		{"DeadlineMillis", sourceDeadlineMillis},
		{"EventNamesTheRowsDeadline", sourceEventDeadline},
		{"BadRows", sourceBadRows},
		{"StartChecks", sourceStartChecks},
		{"LockedRowLeftOut", sourceLockedRow},
		{"LockedStockRowLeftOut", sourceLockedStock},
		{"PayBoundaryIsTheStatementsClock", sourcePayBoundary},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

func sourceRefusals(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	good := shop.Source("shop_orders")
	for _, c := range []struct {
		name string
		edit func(*hourglass.Source)
		want string
	}{
		{"unknown table", func(s *hourglass.Source) { s.Table = shop.T("nope") }, "does not exist"},
		{"unknown key", func(s *hourglass.Source) { s.Key = "nope" }, "no column nope"},
		{"key not an integer", func(s *hourglass.Source) { s.Key = "status" }, "want an integer column"},
		{"unknown deadline", func(s *hourglass.Source) { s.Deadline = "nope" }, "no column nope"},
		{"deadline not a time", func(s *hourglass.Source) { s.Deadline = "status" }, "want TIMESTAMP/DATETIME"},
		{"deadline ms on a time", func(s *hourglass.Source) { s.DeadlineUnit = "ms" }, "deadline_unit: ms wants a BIGINT"},
		{"guard without :key", func(s *hourglass.Source) {
			s.Close[0] = "UPDATE " + shop.T("orders") + " SET status = 'CLOSED' WHERE status = 'UNPAID'"
		}, "must bind the row's key with :key"},
		{"statement does not prepare", func(s *hourglass.Source) { s.Close[1] = "UPDATE " + shop.T("stock") + " SET nope = 1 WHERE sku = :key" }, "close[1]: does not prepare"},
		{"pending does not prepare", func(s *hourglass.Source) { s.Pending = "nope = 'UNPAID'" }, "pending: does not prepare"},
		{"two statements", func(s *hourglass.Source) { s.Close[1] += "; DELETE FROM " + shop.T("stock") }, "one statement"},
	} {
		src := good
		src.Close = slices.Clone(good.Close)
		c.edit(&src)
		_, _, err := db.OpenSource(t.Context(), src)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: OpenSource = %v; want one line with %q", c.name, err, c.want)
		}
	}
	if _, w, err := db.OpenSource(t.Context(), good); err != nil || len(w) != 0 {
		t.Errorf("the good source: %v, warnings %q", err, w)
	}
}

func sourceIndexWarning(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, false)
	_, w, err := db.OpenSource(t.Context(), shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 1 || !strings.Contains(w[0], "window query") || !strings.Contains(w[0], "CREATE INDEX orders_expire_at ON "+shop.T("orders")+" (expire_at)") {
		t.Errorf("warnings %q; want one naming the window query's index", w)
	}
}

func sourceReads(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 100)
	tbl, _, err := db.OpenSource(t.Context(), shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if k, err := tbl.MaxKey(ctx); err != nil || k != 0 {
		t.Fatalf("MaxKey of an empty table = %d, %v", k, err)
	}
	var ids []int64
	for i := range 5 {
		ids = append(ids, shop.Order(t, "u", time.Duration(i)*time.Hour-time.Minute, "A", 1))
	}
	if ok, err := shop.Pay(t, ids[4]); err != nil || !ok {
		t.Fatalf("pay %d: %v %v", ids[4], ok, err)
	}
	if k, err := tbl.MaxKey(ctx); err != nil || k != ids[4] {
		t.Fatalf("MaxKey = %d, %v; want %d", k, err, ids[4])
	}
	now := time.Now()
	// Due pages (deadline, key) through the cursor; the paid one is not pending.
	var got []int64
	p := hourglass.PendingDueParams{Until: now.Add(150 * time.Minute), Limit: 1}
	for {
		page, err := tbl.Due(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page[0].ID)
		p.After, p.AfterID = page[0].At, page[0].ID
	}
	if !slices.Equal(got, ids[:3]) {
		t.Errorf("Due paged %v; want %v", got, ids[:3])
	}
	page, err := tbl.Due(ctx, hourglass.PendingDueParams{Until: now.Add(10 * time.Hour), Limit: 10, Parts: hourglass.Parts{hourglass.PartitionOf(ids[1])}})
	if err != nil || len(page) != 1 || page[0].ID != ids[1] {
		t.Errorf("Due of ids[1]'s partition = %v, %v", page, err)
	}
	if page, err := tbl.Due(ctx, hourglass.PendingDueParams{Until: now.Add(10 * time.Hour), Limit: 10, Parts: hourglass.Parts{}}); err != nil || len(page) != 0 {
		t.Errorf("Due of no partition = %v, %v", page, err)
	}
	tail, err := tbl.Tail(ctx, ids[1], 10)
	if err != nil || len(tail) != 2 || tail[0].ID != ids[2] || tail[1].ID != ids[3] {
		t.Errorf("Tail after %d = %v, %v; want %v", ids[1], tail, err, ids[2:4])
	}
	if d := tail[0].At.Sub(now); d < 110*time.Minute || d > 130*time.Minute {
		t.Errorf("Tail's deadline is %s from now; want about 2h (UTC read as UTC)", d)
	}
	pend, err := tbl.Pending(ctx, []int64{ids[0], ids[4], 1 << 40})
	if err != nil || len(pend) != 1 || pend[0].ID != ids[0] {
		t.Errorf("Pending = %v, %v; want only %d", pend, err, ids[0])
	}
}

func sourceClose(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	ctx := t.Context()
	hook, err := db.CreateWebhook(ctx, hourglass.WebhookParams{URL: "https://example.com/h", Events: []hourglass.EventType{hourglass.EventSourceClosed}, Secret: strings.Repeat("s", 16)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tbl, _, err := db.OpenSource(ctx, shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	due := shop.Order(t, "u", -time.Second, "A", 3)
	later := shop.Order(t, "u", time.Hour, "A", 2)
	if a, r := shop.Stock(t, "A"); a != 5 || r != 5 {
		t.Fatalf("stock after the orders = %d/%d", a, r)
	}
	rows := []hourglass.DueItem{{ID: later, At: time.Now()}, {ID: due, At: time.Now().Add(-time.Second)}}
	res, err := tbl.Close(ctx, rows)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Key != due || res[0].Outcome != hourglass.SourceClosed || res[0].ClosedAt.IsZero() ||
		res[1].Key != later || res[1].Outcome != hourglass.SourceNoop || !res[1].Pending || time.Until(res[1].Deadline) < 50*time.Minute {
		t.Fatalf("Close = %+v; want %d closed, %d a no-op still pending an hour out", res, due, later)
	}
	if st := shop.Status(t, due); st != "CLOSED" {
		t.Errorf("status %s", st)
	}
	if a, r := shop.Stock(t, "A"); a != 8 || r != 2 {
		t.Errorf("stock after the close = %d/%d; want 8/2 (3 released once)", a, r)
	}
	// Again: a no-op, nothing released twice.
	res, err = tbl.Close(ctx, rows[1:])
	if err != nil || len(res) != 1 || res[0].Outcome != hourglass.SourceNoop || res[0].Pending {
		t.Fatalf("a second close = %+v, %v; want a no-op, not pending", res, err)
	}
	if a, r := shop.Stock(t, "A"); a != 8 || r != 2 {
		t.Errorf("stock after a second close = %d/%d", a, r)
	}
	evs, err := db.OrderEvents(ctx, hourglass.SourceEventOrderID("shop_orders", due))
	if err != nil || len(evs) != 1 || evs[0].Type != hourglass.EventSourceClosed {
		t.Fatalf("events of the closed row: %+v, %v; want one source.closed", evs, err)
	}
	var body map[string]any
	if err := json.Unmarshal(evs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body["type"] != "source.closed" || body["source"] != "shop_orders" || body["key"] != float64(due) || body["id"] != evs[0].ID ||
		body["closed_at"] != res0ClosedAt(evs[0]) || body["deadline"] == nil {
		t.Errorf("event body %s", evs[0].Body)
	}
	dl, err := db.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: time.Now().Add(time.Hour), Limit: 10})
	if err != nil || len(dl) != 1 {
		t.Fatalf("deliveries %v, %v; want one", dl, err)
	}
	pd, err := db.PendingDelivery(ctx, dl[0].ID)
	if err != nil || pd.WebhookID != hook.ID || string(pd.Body) != string(evs[0].Body) {
		t.Errorf("delivery %+v, %v", pd, err)
	}
}

// res0ClosedAt is the event's created_at as the body writes it.
func res0ClosedAt(e hourglass.EventRecord) string {
	return e.CreatedAt.UTC().Format(hourglass.TimeFormat)
}

func sourceGuardSeveral(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	src := shop.Source("shop_orders")
	src.Close = []string{"UPDATE " + shop.T("orders") + " SET status = 'CLOSED' WHERE status = 'UNPAID' AND id >= :key"}
	tbl, _, err := db.OpenSource(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	a := shop.Order(t, "u", -time.Second, "A", 1)
	b := shop.Order(t, "u", -time.Second, "A", 1)
	res, err := tbl.Close(t.Context(), []hourglass.DueItem{{ID: a}})
	if err != nil || len(res) != 1 || res[0].Outcome != hourglass.SourceGuardError || res[0].Affected != 2 {
		t.Fatalf("Close = %+v, %v; want a guard error of 2 rows", res, err)
	}
	if shop.Status(t, a) != "UNPAID" || shop.Status(t, b) != "UNPAID" {
		t.Error("a guard that matched several rows changed them")
	}
	if evs, _ := db.OrderEvents(t.Context(), hourglass.SourceEventOrderID("shop_orders", a)); len(evs) != 0 {
		t.Errorf("events %v", evs)
	}
}

func sourceStatementFails(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	shop.PutStock(t, "B", 10)
	tbl, _, err := db.OpenSource(t.Context(), shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	bad := shop.Order(t, "u", -time.Second, "A", 2)
	good := shop.Order(t, "u", -time.Second, "B", 2)
	// The shop moved A's reservation by hand: releasing 2 would make it negative.
	shop.Exec(t, "UPDATE "+shop.T("stock")+" SET reserved = 1 WHERE sku = 'A'")
	res, err := tbl.Close(t.Context(), []hourglass.DueItem{{ID: bad}, {ID: good}})
	if err != nil || len(res) != 2 {
		t.Fatalf("Close = %+v, %v", res, err)
	}
	if res[0].Outcome != hourglass.SourceFailed || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "close[1]") || res[1].Outcome != hourglass.SourceClosed {
		t.Fatalf("Close = %+v; want the first failed at close[1], the second closed", res)
	}
	if shop.Status(t, bad) != "UNPAID" || shop.Status(t, good) != "CLOSED" {
		t.Errorf("statuses %s, %s; want the failed row rolled back to its savepoint", shop.Status(t, bad), shop.Status(t, good))
	}
}

func sourceTwoStores(t *testing.T, h SourceHarness) {
	a, b, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 1000)
	ta, _, err := a.OpenSource(t.Context(), shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := b.OpenSource(t.Context(), shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []hourglass.DueItem
	for range 50 {
		rows = append(rows, hourglass.DueItem{ID: shop.Order(t, "u", -time.Second, "A", 1)})
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		closed = map[int64]int{}
	)
	for _, tbl := range []hourglass.SourceTable{ta, tb, ta, tb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := slices.Clone(rows)
			if tbl == tb {
				slices.Reverse(order)
			}
			res, err := tbl.Close(t.Context(), order)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range res {
				if r.Outcome == hourglass.SourceClosed {
					closed[r.Key]++
				}
			}
		}()
	}
	wg.Wait()
	for _, r := range rows {
		if closed[r.ID] != 1 {
			t.Errorf("row %d closed %d times", r.ID, closed[r.ID])
		}
		if evs, _ := a.OrderEvents(t.Context(), hourglass.SourceEventOrderID("shop_orders", r.ID)); len(evs) != 1 {
			t.Errorf("row %d has %d events", r.ID, len(evs))
		}
	}
	if avail, res := shop.Stock(t, "A"); avail != 1000 || res != 0 {
		t.Errorf("stock %d/%d; want every reservation released once", avail, res)
	}
}

// sourceDeadlineMillis: a deadline kept as BIGINT unix milliseconds
// (deadline_unit: ms) is read, paged and closed by.
func sourceDeadlineMillis(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	nowMs := "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
	ddl := `CREATE TABLE ` + shop.T("coupons") + ` (id BIGINT AUTO_INCREMENT PRIMARY KEY, state VARCHAR(16) NOT NULL, expires_ms BIGINT NOT NULL, KEY (state, expires_ms))`
	if shop.Postgres {
		nowMs = "(extract(epoch FROM now()) * 1000)::bigint"
		ddl = `CREATE TABLE ` + shop.T("coupons") + ` (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, expires_ms BIGINT NOT NULL)`
	}
	shop.Exec(t, ddl)
	if shop.Postgres {
		shop.Exec(t, `CREATE INDEX coupons_state_expires ON `+shop.T("coupons")+` (state, expires_ms)`)
	}
	src := hourglass.Source{Name: "coupons", Table: shop.T("coupons"), Key: "id", Deadline: "expires_ms", DeadlineUnit: "ms",
		Pending: "state = 'ACTIVE'", Close: []string{"UPDATE " + shop.T("coupons") + " SET state = 'EXPIRED' WHERE id = :key AND state = 'ACTIVE' AND expires_ms <= " + nowMs}}
	tbl, w, err := db.OpenSource(t.Context(), src)
	if err != nil || len(w) != 0 {
		t.Fatalf("OpenSource: %v, warnings %q", err, w)
	}
	past, future := time.Now().Add(-time.Second).Truncate(time.Millisecond), time.Now().Add(time.Hour).Truncate(time.Millisecond)
	shop.Exec(t, "INSERT INTO "+shop.T("coupons")+" (state, expires_ms) VALUES ('ACTIVE', ?), ('ACTIVE', ?)", hourglass.UnixMilli(past), hourglass.UnixMilli(future))
	rows, err := tbl.Due(t.Context(), hourglass.PendingDueParams{Until: time.Now().Add(2 * time.Hour), Limit: 10})
	if err != nil || len(rows) != 2 || !rows[0].At.Equal(past) || !rows[1].At.Equal(future) {
		t.Fatalf("Due = %v, %v; want the two deadlines %s and %s", rows, err, past, future)
	}
	res, err := tbl.Close(t.Context(), rows)
	if err != nil || len(res) != 2 || res[0].Outcome != hourglass.SourceClosed || res[1].Outcome != hourglass.SourceNoop || !res[1].Pending || !res[1].Deadline.Equal(future) {
		t.Fatalf("Close = %+v, %v; want the past one closed, the future one pending", res, err)
	}
}

// sourceEventDeadline: a row timed for one deadline whose row says another
// when it closes (the shop moved it, and the close came once that one had
// passed too) closes with the row's deadline in its result and event.
func sourceEventDeadline(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 10)
	ctx := t.Context()
	tbl, _, err := db.OpenSource(ctx, shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	id := shop.Order(t, "u", -time.Second, "A", 1)
	rows, err := tbl.Due(ctx, hourglass.PendingDueParams{Until: time.Now().Add(time.Hour), Limit: 10})
	if err != nil || len(rows) != 1 || rows[0].ID != id {
		t.Fatalf("Due = %v, %v; want row %d", rows, err, id)
	}
	row := rows[0].At
	timed := row.Add(-10 * time.Minute) // what hourglass timed before the shop moved it
	res, err := tbl.Close(ctx, []hourglass.DueItem{{ID: id, At: timed}})
	if err != nil || len(res) != 1 || res[0].Outcome != hourglass.SourceClosed || !res[0].Deadline.Equal(row) {
		t.Fatalf("Close = %+v, %v; want closed with the row's deadline %s", res, err, row)
	}
	evs, err := db.OrderEvents(ctx, hourglass.SourceEventOrderID("shop_orders", id))
	if err != nil || len(evs) != 1 {
		t.Fatalf("events %+v, %v", evs, err)
	}
	var body struct {
		Deadline string `json:"deadline"`
	}
	if err := json.Unmarshal(evs[0].Body, &body); err != nil || body.Deadline != row.UTC().Format(hourglass.TimeFormat) {
		t.Errorf("event deadline %q (%v); want the row's %s, not the one timed (%s)", body.Deadline, err, row.UTC().Format(hourglass.TimeFormat), timed.UTC().Format(hourglass.TimeFormat))
	}
}
