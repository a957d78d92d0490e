package hourglasstest

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// BadOrder inserts an unpaid order whose expire_at is the SQL expression
// deadline (a literal such as '-infinity' or '0000-00-00 00:00:00'), as a
// shop would: on MySQL through a session with a lax sql_mode, which
// accepts zero dates. key, when not 0, is its id. It returns its id.
func (s Shop) BadOrder(t testing.TB, key int64, deadline string) int64 {
	t.Helper()
	ctx := t.Context()
	conn, err := s.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cols, vals := "user_id, status, expire_at", "'u', 'UNPAID', "+deadline
	if key != 0 {
		cols, vals = "id, "+cols, fmt.Sprint(key)+", "+vals
	}
	q := "INSERT INTO " + s.T("orders") + " (" + cols + ") VALUES (" + vals + ")"
	if s.Postgres {
		var id int64
		if err := conn.QueryRowContext(ctx, q+" RETURNING id").Scan(&id); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return id
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION sql_mode = ''"); err != nil {
		t.Fatal(err)
	}
	res, err := conn.ExecContext(ctx, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		t.Fatal(err)
	}
	if key != 0 {
		id = key
	}
	return id
}

// BadDeadline sets an order's expire_at to the SQL expression deadline,
// as BadOrder writes it.
func (s Shop) BadDeadline(t testing.TB, id int64, deadline string) {
	t.Helper()
	conn, err := s.DB.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !s.Postgres {
		if _, err := conn.ExecContext(t.Context(), "SET SESSION sql_mode = ''"); err != nil {
			t.Fatal(err)
		}
	}
	q := fmt.Sprintf("UPDATE %s SET expire_at = %s WHERE id = %d", s.T("orders"), deadline, id)
	if _, err := conn.ExecContext(t.Context(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// BadDeadlines are deadlines a shop can write that hourglass cannot close
// by, as SQL, with the reason hourglass reports: PostgreSQL's infinities
// and years out of range; MySQL's zero dates and zero-in-date values
// (several, so that a page holds nothing else).
func (s Shop) BadDeadlines() map[string]string {
	if s.Postgres {
		return map[string]string{
			"'-infinity'":           hourglass.BadDeadlineOutOfRange,
			"'infinity'":            hourglass.BadDeadlineOutOfRange,
			"'10000-01-01'":         hourglass.BadDeadlineOutOfRange,
			"'1969-12-31 23:59:59'": hourglass.BadDeadlineOutOfRange,
		}
	}
	return map[string]string{
		"'0000-00-00 00:00:00'":     hourglass.BadDeadlineOutOfRange,
		"'2026-00-15 00:00:00'":     hourglass.BadDeadlineUnreadable,
		"'2026-00-15 00:00:00.001'": hourglass.BadDeadlineUnreadable,
		"'2026-00-15 00:00:00.002'": hourglass.BadDeadlineUnreadable,
		"'1969-12-31 23:59:59'":     hourglass.BadDeadlineOutOfRange,
	}
}

// BadDeadlinesList is BadDeadlines' keys, sorted.
func (s Shop) BadDeadlinesList() []string {
	return slices.Sorted(maps.Keys(s.BadDeadlines()))
}

// sourceBadRows: pending rows with a deadline or key hourglass cannot
// close by, among good ones, stop no read: every read returns the good
// rows (paged one at a time through the cursors), BadRows names each bad
// one with its reason, and a close whose row's deadline turned bad writes
// an event of valid times.
func sourceBadRows(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	shop.PutStock(t, "A", 100)
	ctx := t.Context()
	tbl, _, err := db.OpenSource(ctx, shop.Source("shop_orders"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{} // key → reason
	good := []int64{shop.Order(t, "u", -2*time.Second, "A", 1)}
	for dl, reason := range shop.BadDeadlines() {
		want[fmt.Sprint(shop.BadOrder(t, 0, dl))] = reason
	}
	good = append(good, shop.Order(t, "u", -time.Second, "A", 1), shop.Order(t, "u", time.Hour, "A", 1))
	want[fmt.Sprint(shop.BadOrder(t, -5, shop.Now()))] = hourglass.BadKeyOutOfRange
	// Last: on MySQL no AUTO_INCREMENT key follows the largest.
	want[fmt.Sprint(shop.BadOrder(t, math.MaxInt64, shop.Now()))] = hourglass.BadKeyOutOfRange

	if k, err := tbl.MaxKey(ctx); err != nil || k != good[2] {
		t.Errorf("MaxKey = %d, %v; want %d, the largest key in range (the tail reads above it)", k, err, good[2])
	}
	ids := func(rows []hourglass.DueItem) []int64 {
		var out []int64
		for _, r := range rows {
			if !hourglass.ValidSourceDeadline(r.At) {
				t.Errorf("row %d has the deadline %s", r.ID, r.At)
			}
			out = append(out, r.ID)
		}
		slices.Sort(out)
		return out
	}
	var got []hourglass.DueItem
	p := hourglass.PendingDueParams{Until: time.Now().Add(2 * time.Hour), Limit: 1}
	for range 20 {
		page, err := tbl.Due(ctx, p)
		if err != nil {
			t.Fatalf("Due: %v", err)
		}
		if len(page) == 0 {
			break
		}
		got = append(got, page...)
		p.After, p.AfterID = page[0].At, page[0].ID
	}
	if ids(got); !slices.Equal(ids(got), good) {
		t.Errorf("Due paged %v; want the good rows %v", ids(got), good)
	}
	got = got[:0]
	after := int64(0)
	for range 20 {
		page, err := tbl.Tail(ctx, after, 1)
		if err != nil {
			t.Fatalf("Tail: %v", err)
		}
		if len(page) == 0 {
			break
		}
		got, after = append(got, page...), page[0].ID
	}
	if !slices.Equal(ids(got), good) {
		t.Errorf("Tail paged %v; want the good rows %v", ids(got), good)
	}
	holes, err := tbl.Holes(ctx, [][2]int64{{math.MinInt64, math.MaxInt64}}, 100)
	if err != nil || !slices.Equal(ids(holes), good) {
		t.Errorf("Holes = %v, %v; want the good rows %v", ids(holes), err, good)
	}
	all := slices.Clone(good)
	for k := range want {
		var id int64
		fmt.Sscan(k, &id)
		all = append(all, id)
	}
	pend, err := tbl.Pending(ctx, all)
	if err != nil || !slices.Equal(ids(pend), good) {
		t.Errorf("Pending = %v, %v; want the good rows %v", ids(pend), err, good)
	}
	bad, err := tbl.BadRows(ctx, 100)
	if err != nil {
		t.Fatalf("BadRows: %v", err)
	}
	found := map[string]string{}
	for _, b := range bad {
		found[b.Key] = b.Reason
		if b.Deadline == "" {
			t.Errorf("bad row %s: no deadline text", b.Key)
		}
	}
	for k, reason := range want {
		if found[k] != reason {
			t.Errorf("BadRows: row %s is %q; want %q", k, found[k], reason)
		}
	}
	if len(found) != len(want) {
		t.Errorf("BadRows = %+v; want %v", bad, want)
	}

	// A row timed with a good deadline that the shop then made bad closes
	// (its guard says so) with the deadline it was timed at.
	timed := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	shop.BadDeadline(t, good[0], shop.BadDeadlinesList()[0]) // -infinity, 0000-00-00: the guard's <= now holds
	res, err := tbl.Close(ctx, []hourglass.DueItem{{ID: good[0], At: timed}, {ID: good[1], At: timed}})
	if err != nil || len(res) != 2 {
		t.Fatalf("Close = %+v, %v", res, err)
	}
	for _, r := range res {
		if r.Outcome != hourglass.SourceClosed {
			t.Errorf("row %d: %+v; want closed", r.Key, r)
			continue
		}
		evs, err := db.OrderEvents(ctx, hourglass.SourceEventOrderID("shop_orders", r.Key))
		if err != nil || len(evs) != 1 {
			t.Fatalf("events of %d: %+v, %v", r.Key, evs, err)
		}
		var body map[string]any
		if err := json.Unmarshal(evs[0].Body, &body); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"deadline", "closed_at", "created_at"} {
			s, _ := body[f].(string)
			if at, err := time.Parse(time.RFC3339, s); err != nil || !hourglass.ValidSourceDeadline(at) {
				t.Errorf("row %d: event %s %q (%v); want an RFC 3339 time from 1970 to 9999", r.Key, f, s, err)
			}
		}
	}
}

// sourceStartChecks: Open samples the pending rows and refuses a
// deadline_unit: ms column of epoch seconds or microseconds and TIMESTAMP
// deadlines decades away, naming the column, the unit and a value;
// refuses a key without a unique index of its own; names the schema an
// unqualified table resolved in.
func sourceStartChecks(t *testing.T, h SourceHarness) {
	db, _, shop := h.Open(t)
	shop.Create(t, true)
	ctx := t.Context()
	ddl := func(name, key string) string {
		if shop.Postgres {
			return `CREATE TABLE ` + shop.T(name) + ` (id BIGINT NOT NULL ` + key + `, state TEXT NOT NULL, expires BIGINT NOT NULL)`
		}
		return `CREATE TABLE ` + shop.T(name) + ` (id BIGINT NOT NULL ` + key + `, state VARCHAR(16) NOT NULL, expires BIGINT NOT NULL)`
	}
	src := func(name string) hourglass.Source {
		return hourglass.Source{Name: name, Table: shop.T(name), Key: "id", Deadline: "expires", DeadlineUnit: "ms",
			Pending: "state = 'ACTIVE'", Close: []string{"UPDATE " + shop.T(name) + " SET state = 'EXPIRED' WHERE id = :key AND state = 'ACTIVE'"}}
	}
	now := time.Now()
	for _, c := range []struct {
		name  string
		value int64 // of every pending row
		want  []string
	}{
		{"seconds", now.Add(2 * time.Hour).Unix(), []string{"expires", "epoch seconds", "deadline_unit: ms"}},
		{"micros", now.Add(2 * time.Hour).UnixMicro(), []string{"expires", "epoch microseconds", "deadline_unit: ms"}},
		{"millis", now.Add(2 * time.Hour).UnixMilli(), nil},
	} {
		shop.Exec(t, ddl(c.name, "PRIMARY KEY"))
		for i := range 5 {
			shop.Exec(t, "INSERT INTO "+shop.T(c.name)+" (id, state, expires) VALUES (?, 'ACTIVE', ?)", i+1, c.value+int64(i))
		}
		_, _, err := db.OpenSource(ctx, src(c.name))
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: OpenSource = %v; want it opened", c.name, err)
			}
			continue
		}
		want := append(c.want, shop.T(c.name), fmt.Sprint(c.value+2))
		if err == nil || strings.Contains(err.Error(), "\n") || slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(err.Error(), w) }) {
			t.Errorf("%s: OpenSource = %v; want one line with %q", c.name, err, want)
		}
	}
	// TIMESTAMP deadlines decades away.
	shop.Exec(t, "INSERT INTO "+shop.T("orders")+" (user_id, status, expire_at) VALUES ('u', 'UNPAID', ?)", now.AddDate(60, 0, 0).UTC().Format("2006-01-02 15:04:05"))
	if _, _, err := db.OpenSource(ctx, shop.Source("shop_orders")); err == nil || !strings.Contains(err.Error(), "decades") || !strings.Contains(err.Error(), shop.T("orders")+".expire_at") {
		t.Errorf("deadlines 60 years ahead: OpenSource = %v; want refused, naming %s.expire_at", err, shop.T("orders"))
	}
	// A key without a unique index of its own.
	for name, key := range map[string]string{"nounique": "", "composite": ""} {
		shop.Exec(t, ddl(name, key))
		idx := "CREATE INDEX " + name + "_id ON " + shop.T(name) + " (id)"
		if name == "composite" {
			idx = "CREATE UNIQUE INDEX " + name + "_id ON " + shop.T(name) + " (id, state)"
		}
		shop.Exec(t, idx)
		_, _, err := db.OpenSource(ctx, src(name))
		if err == nil || !strings.Contains(err.Error(), "no unique index") || !strings.Contains(err.Error(), shop.T(name)+".id") {
			t.Errorf("%s: OpenSource = %v; want refused: no unique index on %s.id", name, err, shop.T(name))
		}
	}
	shop.Exec(t, ddl("uniquekey", "UNIQUE"))
	if _, _, err := db.OpenSource(ctx, src("uniquekey")); err != nil {
		t.Errorf("a UNIQUE key: OpenSource = %v; want it opened", err)
	}
	// An unqualified table resolves in hourglass's own schema (database),
	// where hourglass's own orders table is, and the message names it.
	s := shop.Source("shop_orders")
	s.Table = "orders"
	if _, _, err := db.OpenSource(ctx, s); err == nil || !regexp.MustCompile(`: [a-z0-9_]+\.orders (has no column expire_at|does not exist)`).MatchString(err.Error()) {
		t.Errorf("an unqualified table: OpenSource = %v; want it named with the schema it resolved in", err)
	}
}
