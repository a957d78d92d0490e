package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"zombiezen.com/go/sqlite"
)

// TestConnQuerier binds every type package sqlq passes, reads each back,
// and refuses, with the parameter or column named, a type it does not know.
func TestConnQuerier(t *testing.T) {
	conn, err := sqlite.OpenConn(":memory:", sqlite.OpenReadWrite|sqlite.OpenMemory)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, x := context.Background(), connQuerier{conn}
	at := time.Date(2026, 11, 26, 12, 0, 0, 5e6, time.UTC)

	rows, err := x.Query(ctx, `SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?`,
		int(7), int32(-3), int64(1<<40), true, 2.5, "text", []byte("bytes"), at, nil, []byte(nil))
	if err != nil {
		t.Fatal(err)
	}
	var (
		i, n32     int
		i64, ms    int64
		b          bool
		f          float64
		s          string
		bs, nullBs []byte
		null64     *int64
	)
	if !rows.Next() {
		t.Fatalf("no row: %v", rows.Err())
	}
	if err := rows.Scan(&i, &n32, &i64, &b, &f, &s, &bs, &ms, &null64, &nullBs); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if i != 7 || n32 != -3 || i64 != 1<<40 || !b || f != 2.5 || s != "text" || string(bs) != "bytes" ||
		ms != hourglass.UnixMilli(at) || null64 != nil || nullBs != nil {
		t.Errorf("read back %v %v %v %v %v %q %q %v %v %v", i, n32, i64, b, f, s, bs, ms, null64, nullBs)
	}

	var ns *string
	rows, err = x.Query(ctx, `SELECT 'x', 9`)
	if err != nil {
		t.Fatal(err)
	}
	var p64 *int64
	if !rows.Next() || rows.Scan(&ns, &p64) != nil || ns == nil || *ns != "x" || p64 == nil || *p64 != 9 {
		t.Errorf("nullable columns: %v %v", ns, p64)
	}
	var u uint8
	if err := rows.Scan(&ns, &u); err == nil || !strings.Contains(err.Error(), "scan column 1: unsupported type *uint8") {
		t.Errorf("scan into *uint8: %v", err)
	}
	rows.Close()

	for _, run := range []func() error{
		func() error { _, err := x.Query(ctx, `SELECT ?, ?`, 1, struct{}{}); return err },
		func() error { _, err := x.Exec(ctx, `SELECT ?, ?`, 1, struct{}{}); return err },
	} {
		if err := run(); err == nil || !strings.Contains(err.Error(), "bind parameter 2: unsupported type struct {}") {
			t.Errorf("bind a struct: %v", err)
		}
	}
	// A refused bind leaves the cached statement clean for its next use.
	rows, err = x.Query(ctx, `SELECT ?, ?`, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	var a, c int
	if !rows.Next() || rows.Scan(&a, &c) != nil || a != 1 || c != 2 {
		t.Errorf("after a refused bind: %d %d (%v)", a, c, rows.Err())
	}
	rows.Close()
}

// TestPendingDeliveriesReadByKey: the batch read of pending deliveries
// looks each one up by its primary key. Planned freely, SQLite took the
// pending rows of the (state, next_attempt_at) index and filtered them by
// id: a burst's 100,000 pending deliveries scanned for every read of 8
// (its deliveries' first attempts took 11 s instead of 6).
func TestPendingDeliveriesReadByKey(t *testing.T) {
	s := openAt(t, nil)
	query, args := s.PendingDeliveriesSQL([]int64{1, 2, 3, 4, 5, 6, 7, 8})
	plan := queryPlan(t, s, query, args...)
	got := strings.Join(plan, "\n")
	if !strings.Contains(got, "SEARCH d USING INTEGER PRIMARY KEY") || strings.Contains(got, "webhook_deliveries_due") {
		t.Errorf("the deliveries are not read by their primary key:\n%s", got)
	}
}
