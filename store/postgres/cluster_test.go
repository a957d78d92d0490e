package postgres

// What the shared suite (hourglasstest's Cluster area) cannot see: how a
// batch's created orders are split into notifications, and the reload after
// the listening connection is lost.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

func TestCreatedPayloads(t *testing.T) {
	t.Parallel()
	const origin = "ORIGIN1234"
	for _, tc := range []struct {
		name     string
		n        int
		id       int64 // the first id; ids grow by one
		payloads int
	}{
		{"none", 0, 1, 0},
		{"one", 1, 1, 1},
		{"small ids fit one payload", 300, 1, 1},
		// 19-digit ids and 13-digit deadlines: 34 bytes an entry, 232
		// entries a payload.
		{"large ids", 1000, 1_000_000_000_000_000_000, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ids, deadlines := make([]int64, tc.n), make([]int64, tc.n)
			for i := range ids {
				ids[i], deadlines[i] = tc.id+int64(i), 1_767_225_600_000+int64(i)
			}
			ps := createdPayloads(origin, ids, deadlines)
			if len(ps) != tc.payloads {
				t.Fatalf("%d ids in %d payloads, want %d", tc.n, len(ps), tc.payloads)
			}
			var got []hourglass.Timer
			for i, p := range ps {
				if len(p) > createdPayloadMax {
					t.Fatalf("payload %d is %d bytes, over %d", i, len(p), createdPayloadMax)
				}
				if i < len(ps)-1 && len(p) < createdPayloadMax-40 {
					t.Fatalf("payload %d is %d bytes: cut before it was full", i, len(p))
				}
				o, ts, err := parseCreated(p)
				if err != nil || o != origin {
					t.Fatalf("parseCreated(payload %d) = %q, %v", i, o, err)
				}
				got = append(got, ts...)
			}
			if len(got) != tc.n {
				t.Fatalf("%d timers parsed back, want %d", len(got), tc.n)
			}
			for i, tm := range got {
				if tm.OrderID != ids[i] || hourglass.UnixMilli(tm.Deadline) != deadlines[i] {
					t.Fatalf("timer %d = %+v, want id %d deadline %d", i, tm, ids[i], deadlines[i])
				}
			}
		})
	}
	for _, bad := range []string{"", "no origin", "o|1", "o|1:x", "o|x:1", "o|1:2,"} {
		if _, _, err := parseCreated(bad); err == nil {
			t.Errorf("parseCreated(%q) = nil error", bad)
		}
	}
}

// setupShared opens two store values on a new database, closed in
// t.Cleanup, with a product "W" of plenty of stock.
func setupShared(t *testing.T) (url string, a, b *Store) {
	t.Helper()
	url = pgtest.NewDatabase(t)
	open := func() *Store {
		s, err := Open(context.Background(), Config{URL: url, MaxConns: 4})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b = open(), open()
	if _, err := b.PutProduct(context.Background(), hourglass.Product{SKU: "W", Name: "W", Category: "x", Available: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	return url, a, b
}

// watch runs a.WatchCreated until the test ends; each call of fn arrives on
// the channel (nil for a reload).
func watch(t *testing.T, s *Store) <-chan []hourglass.Timer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan []hourglass.Timer, 10000)
	done := make(chan error, 1)
	go func() { done <- s.WatchCreated(ctx, func(ts []hourglass.Timer) { calls <- ts }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchCreated returned %v", err)
		}
	})
	select {
	case ts := <-calls:
		if ts != nil {
			t.Fatalf("WatchCreated's first call is %d timers, want the reload fn(nil)", len(ts))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchCreated did not call fn(nil) when it began")
	}
	return calls
}

// TestWatchCreatedBigBatch commits 2,000 creates in one group commit, with
// order ids of 19 digits: their announcement is about 70 kB, which
// PostgreSQL takes only as several notifications under 8,000 bytes each.
func TestWatchCreatedBigBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, a, b := setupShared(t)
	calls := watch(t, a)
	if _, err := b.pool.Exec(ctx, `SELECT setval($1::regclass, 1000000000000000000)`, b.orderSeq); err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+pgx.Identifier{b.createdChannel}.Sanitize()); err != nil {
		t.Fatal(err)
	}

	const n = 2000
	items := []hourglass.Item{{SKU: "W", Quantity: 1}}
	ops := make([]*op, n)
	for i := range ops {
		ops[i] = &op{ctx: ctx, kind: opCreate, done: make(chan struct{}), items: stored.EncodeItems(items),
			create: hourglass.CreateOrderParams{UserID: fmt.Sprint("u", i), Timeout: time.Hour, Items: items}}
	}
	b.commit(ops) // one transaction, as the writer runs a batch
	want := map[int64]time.Time{}
	for i, o := range ops {
		if o.err != nil || !o.created {
			t.Fatalf("create %d: created %v, %v", i, o.created, o.err)
		}
		want[o.order.ID] = o.order.Deadline
	}

	// On the wire: several payloads, each under the limit.
	var payloads []string
	for seen := 0; seen < n; {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		note, err := listener.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("after %d notifications (%d orders): %v", len(payloads), seen, err)
		}
		if len(note.Payload) > createdPayloadMax {
			t.Fatalf("a payload of %d bytes, over %d", len(note.Payload), createdPayloadMax)
		}
		payloads = append(payloads, note.Payload)
		seen += strings.Count(note.Payload, ",") + 1
	}
	// 34 bytes an order (19-digit id, 13-digit deadline, two separators):
	// 68,000 bytes, 9 notifications. Many more would mean the batch failed
	// and its creates were committed one by one.
	if len(payloads) < 9 || len(payloads) > 10 {
		t.Fatalf("%d orders announced in %d notifications; want 9 or 10 (one batch, split under %d bytes)", n, len(payloads), createdPayloadMax)
	}

	// Through the other store value's watch: every order, with its deadline.
	for len(want) > 0 {
		select {
		case ts := <-calls:
			for _, tm := range ts {
				d, ok := want[tm.OrderID]
				if !ok {
					t.Fatalf("order %d reported twice or never created", tm.OrderID)
				}
				if !d.Equal(tm.Deadline) {
					t.Fatalf("order %d reported with deadline %s, created with %s", tm.OrderID, tm.Deadline, d)
				}
				delete(want, tm.OrderID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d orders not reported to the other store value's watch", len(want), n)
		}
	}
}

// TestWatchCreatedReloadsAfterListenerLost terminates the listening
// connections: the watch is told to reload (fn(nil)) once its listener is
// back, and reports later creates again. A store value's own creates are
// never reported to its own watch.
func TestWatchCreatedReloadsAfterListenerLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, a, b := setupShared(t)
	calls := watch(t, a)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var killed int
	if err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&killed); err != nil || killed != 2 {
		t.Fatalf("terminated %d listeners (%v), want 2", killed, err)
	}
	select {
	case ts := <-calls:
		if ts != nil {
			t.Fatalf("after the listener was lost, a call with %d timers; want the reload fn(nil) first", len(ts))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no fn(nil) within 10s of the listener's loss")
	}

	mine := mustCreateOn(t, a)
	theirs := mustCreateOn(t, b)
	for {
		select {
		case ts := <-calls:
			if i := slices.IndexFunc(ts, func(tm hourglass.Timer) bool { return tm.OrderID == mine.ID }); i >= 0 {
				t.Fatalf("the watch reported order %d, created through its own store value", mine.ID)
			}
			if slices.ContainsFunc(ts, func(tm hourglass.Timer) bool { return tm.OrderID == theirs.ID }) {
				return
			}
		case <-time.After(10 * time.Second):
			t.Fatal("an order created after the listener reconnected was not reported within 10s")
		}
	}
}

func mustCreateOn(t *testing.T, s *Store) hourglass.Order {
	t.Helper()
	o, _, err := s.CreateOrder(context.Background(), hourglass.CreateOrderParams{UserID: "u", Timeout: time.Hour,
		Items: []hourglass.Item{{SKU: "W", Quantity: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	return o
}
