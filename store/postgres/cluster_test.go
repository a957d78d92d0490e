package postgres

// What the shared suite (hourglasstest's Cluster area) cannot see: how a
// batch's created orders are split into notifications, and the reload after
// the listening connection is lost.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/batch"
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
			var got []int64
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
			if !slices.Equal(got, ids) {
				t.Fatalf("ids parsed back %v, want %v (a payload's deadlines are not used: only the database's)", got, ids)
			}
		})
	}
	for _, bad := range []string{"", "no origin", "o|1", "o|1:x", "o|x:1", "o|1:2,", "|1:2", "o|0:2", "o|-1:2"} {
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
func watch(t *testing.T, s *Store) <-chan []hourglass.DueItem {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan []hourglass.DueItem, 10000)
	done := make(chan error, 1)
	go func() { done <- s.WatchCreated(ctx, func(ts []hourglass.DueItem) { calls <- ts }) }()
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
	ops := make([]*batch.Op, n)
	for i := range ops {
		ops[i] = &batch.Op{Kind: batch.Create, Items: stored.EncodeItems(items),
			Create: hourglass.CreateOrderParams{UserID: fmt.Sprint("u", i), Timeout: time.Hour, Items: items}}
	}
	b.w.Commit(ctx, ops) // one transaction, as the writer runs a batch
	want := map[int64]time.Time{}
	for i, o := range ops {
		if o.Res.Err != nil || !o.Res.Created {
			t.Fatalf("create %d: created %v, %v", i, o.Res.Created, o.Res.Err)
		}
		want[o.Res.Order.ID] = o.Res.Order.Deadline
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
				d, ok := want[tm.ID]
				if !ok {
					t.Fatalf("order %d reported twice or never created", tm.ID)
				}
				if !d.Equal(tm.At) {
					t.Fatalf("order %d reported with deadline %s, created with %s", tm.ID, tm.At, d)
				}
				delete(want, tm.ID)
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
			if i := slices.IndexFunc(ts, func(tm hourglass.DueItem) bool { return tm.ID == mine.ID }); i >= 0 {
				t.Fatalf("the watch reported order %d, created through its own store value", mine.ID)
			}
			if slices.ContainsFunc(ts, func(tm hourglass.DueItem) bool { return tm.ID == theirs.ID }) {
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

// BenchmarkCreatedNotify measures what announcing created orders (the
// NOTIFY of each group commit, for WatchCreated) costs creates: two store
// values on two databases, one of them muted (no created-orders channel),
// take turns of 250 ms under the same load of many goroutines creating
// orders of one item over 1,000 SKUs, so that both see the same noise of a
// shared machine. Between turns the creates in flight drain. It reports the
// creates/s of each and their ratio, and, a steadier figure when the machine
// is busy, the CPU time of a create: this process's during the store's turns
// plus that of the server processes of its database (read from /proc when
// the server runs on this machine).
func BenchmarkCreatedNotify(b *testing.B) {
	ctx := context.Background()
	var stores [2]*Store // 0 notifies, 1 is muted
	var commits, writes atomic.Int64
	for i := range stores {
		s, err := Open(ctx, Config{URL: pgtest.NewDatabase(b),
			Observe: func(n int, _ time.Duration) { commits.Add(1); writes.Add(int64(n)) }})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		for k := range 1000 {
			if _, err := s.PutProduct(ctx, hourglass.Product{SKU: fmt.Sprintf("S%04d", k), Available: 1 << 40}); err != nil {
				b.Fatal(err)
			}
		}
		stores[i] = s
	}
	stores[1].createdChannel = ""
	var (
		turn    sync.RWMutex // creates hold it shared; a change of turn, exclusive
		current atomic.Int32
		creates [2]atomic.Int64
		spent   [2]time.Duration
		cpu     [2]time.Duration // this process's, during the turns
		n       atomic.Int64
	)
	var serverCPU [2]time.Duration
	for i, s := range stores {
		serverCPU[i] = -backendNanos(b, s)
	}
	done := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		start, startCPU := time.Now(), processCPU()
		account := func() {
			now, nowCPU := time.Now(), processCPU()
			spent[current.Load()] += now.Sub(start)
			cpu[current.Load()] += nowCPU - startCPU
			start, startCPU = now, nowCPU
		}
		for {
			select {
			case <-done:
				account()
				return
			case <-time.After(250 * time.Millisecond):
			}
			turn.Lock()
			account()
			current.Store(1 - current.Load())
			turn.Unlock()
		}
	}()
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			turn.RLock()
			i := current.Load()
			_, _, err := stores[i].CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Hour,
				Items: []hourglass.Item{{SKU: fmt.Sprintf("S%04d", n.Add(1)%1000), Quantity: 1}}})
			if err == nil {
				creates[i].Add(1)
			}
			turn.RUnlock()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	close(done)
	<-flipped
	var rate, perCreate [2]float64
	for i, s := range stores {
		serverCPU[i] += backendNanos(b, s)
		rate[i] = float64(creates[i].Load()) / spent[i].Seconds()
		perCreate[i] = float64((cpu[i] + serverCPU[i]).Microseconds()) / float64(creates[i].Load())
	}
	b.ReportMetric(rate[0], "notify-creates/s")
	b.ReportMetric(rate[1], "muted-creates/s")
	b.ReportMetric(rate[0]/rate[1], "ratio")
	b.ReportMetric(float64(writes.Load())/float64(max(commits.Load(), 1)), "writes/commit")
	// Both stores' figures, once each had a turn with creates (a run
	// shorter than a turn has none for the muted one).
	if serverCPU[0] > 0 && serverCPU[1] > 0 && creates[0].Load() > 0 && creates[1].Load() > 0 {
		b.ReportMetric(perCreate[0], "notify-cpu-µs/create")
		b.ReportMetric(perCreate[1], "muted-cpu-µs/create")
	}
}

// processCPU returns the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendPIDs returns the server processes connected to s's database.
func backendPIDs(tb testing.TB, s *Store) []int32 {
	rows, err := s.pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		tb.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		tb.Fatal(err)
	}
	return pids
}

// TestWatchCreatedAnnouncesWithin: a store value with AnnounceWithin
// announces only the orders due within it.
func TestWatchCreatedAnnouncesWithin(t *testing.T) {
	t.Parallel()
	url, a, _ := setupShared(t)
	b, err := Open(context.Background(), Config{URL: url, MaxConns: 4, AnnounceWithin: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	calls := watch(t, a)
	create := func(timeout time.Duration) hourglass.Order {
		o, _, err := b.CreateOrder(context.Background(), hourglass.CreateOrderParams{UserID: "u", Timeout: timeout, Items: []hourglass.Item{{SKU: "W", Quantity: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	create(time.Hour)
	soon := create(30 * time.Second)
	select {
	case ts := <-calls:
		if len(ts) != 1 || ts[0].ID != soon.ID {
			t.Fatalf("announced %v, want only order %d (due within the minute)", ts, soon.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the order due within the minute was not announced")
	}
	select {
	case ts := <-calls:
		t.Fatalf("announced %v, want nothing more", ts)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestIdleTransactionEnded: a session of a store value with IdleTxTimeout
// idle inside a transaction that holds a row lock (its process was paused)
// is ended by the server, so another store value's write of that row goes
// through within about the timeout.
func TestIdleTransactionEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, _, other := setupShared(t)
	paused, err := Open(ctx, Config{URL: url, MaxConns: 4, IdleTxTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer paused.Close()
	tx, err := paused.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT available FROM products WHERE sku = 'W' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, _, err := other.CreateOrder(wctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Minute, Items: []hourglass.Item{{SKU: "W", Quantity: 1}}}); err != nil {
		t.Fatalf("a create waiting for the paused session's lock: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the create waited %s for a session idle in its transaction; want about the 1s timeout", waited)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the idle transaction committed after the server should have ended it")
	}
}
