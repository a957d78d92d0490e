package postgres

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// seqScanOfRows matches a plan line that reads one of the tables that grow
// with the traffic whole.
var seqScanOfRows = regexp.MustCompile(`Seq Scan on (orders|events|timers|webhook_deliveries|idempotency_keys|timer_outbox|fanout_pending|products|timer_requests)\b`)

// TestWriterPlansUseIndexes: every statement the store prepared while it
// created, paid, closed and reminded orders, armed, cancelled and fired
// timers (also from timer_requests) and recorded delivery attempts keeps
// an index path in its generic plan, made while its tables were small:
// never analyzed (autovacuum off, or a new table's first minute), or
// analyzed while empty. pgx prepares each statement once a connection and
// PostgreSQL keeps a generic plan for the connection's life: one costed on
// a table of a few pages is a sequential scan, which the table outgrows
// (issue #40). The connections force the generic plan (plan_cache_mode),
// which PostgreSQL otherwise picks after five executions. What keeps the
// index paths is the store's enable_seqscan=off: with it on, both cases
// fail.
func TestWriterPlansUseIndexes(t *testing.T) {
	t.Run("never analyzed", func(t *testing.T) { writerPlans(t, false, "") })
	t.Run("analyzed empty", func(t *testing.T) { writerPlans(t, true, "") })
}

func writerPlans(t *testing.T, analyze bool, params string) {
	ctx := t.Context()
	url := pgtest.NewDatabase(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	s, err := Open(ctx, Config{URL: url + sep + "plan_cache_mode=force_generic_plan" + params, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if analyze {
		if _, err := s.pool.Exec(ctx, `ANALYZE`); err != nil {
			t.Fatal(err)
		}
	}
	// A few pages of rows, unanalyzed: the size at which the generic plan
	// of "id = ANY($1)" is a sequential scan.
	for _, q := range []string{
		`INSERT INTO orders (user_id, status, items, created_at, deadline) SELECT 'f', 'completed', '[]', g, g FROM generate_series(1, 300) g`,
		`INSERT INTO events (id, type, order_id, created_at) SELECT 'evt_f' || g, 'order.closed', g, g FROM generate_series(1, 300) g`,
		`INSERT INTO timers (key, status, fire_at, request_hash, created_at, updated_at) SELECT 'f' || g, 'fired', g, '\x00', g, g FROM generate_series(1, 300) g`,
	} {
		if _, err := s.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	writerWorkload(t, s)

	conns := s.pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	checked := 0
	for _, c := range conns {
		checked += checkPreparedPlans(t, c)
	}
	t.Logf("%d prepared statements checked", checked)
	if checked < 20 {
		t.Errorf("%d prepared statements checked: the workload did not run", checked)
	}
}

// writerWorkload runs the writer's paths on s, from several goroutines so
// that batches hold several operations.
func writerWorkload(t *testing.T, s *Store) {
	t.Helper()
	ctx := t.Context()
	for _, sku := range []string{"a", "b", "c"} {
		if _, err := s.PutProduct(ctx, hourglass.Product{SKU: sku, Available: 1 << 30}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.CreateWebhook(ctx, hourglass.WebhookParams{URL: "https://hooks.example.com/x", Events: []hourglass.EventType{"*"}, Secret: "0123456789abcdef"}, 10); err != nil {
		t.Fatal(err)
	}
	const n = 48
	var (
		mu  sync.Mutex
		ids []int64
		wg  sync.WaitGroup
	)
	for i := range n {
		wg.Go(func() {
			o, _, err := s.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u", Timeout: time.Hour, RemindBefore: time.Minute,
				IdempotencyKey: fmt.Sprintf("k%d", i), Items: []hourglass.Item{{SKU: []string{"a", "b", "c"}[i%3], Quantity: 1}}})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ids = append(ids, o.ID)
			mu.Unlock()
			if _, _, err := s.ArmTimer(ctx, hourglass.ArmTimerParams{Key: fmt.Sprintf("t%d", i), Delay: time.Hour}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i := 0; i < n/2; i += 8 {
		for _, id := range ids[i : i+4] {
			wg.Go(func() {
				if _, err := s.PayOrder(ctx, id, fmt.Sprintf("pay%d", id)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Go(func() {
			if _, err := s.CloseOrders(ctx, ids[i+4:i+8]); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := s.RemindOrders(ctx, ids[n/2+i:n/2+i+8]); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := s.CancelTimer(ctx, fmt.Sprintf("t%d", i)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	var timers []int64
	for i := n / 2; i < n; i++ {
		tm, err := s.Timer(ctx, fmt.Sprintf("t%d", i))
		if err != nil {
			t.Fatal(err)
		}
		timers = append(timers, tm.ID)
	}
	if _, err := s.FireTimers(ctx, timers); err != nil {
		t.Fatal(err)
	}
	far := time.Now().Add(24 * time.Hour)
	if _, err := s.PendingDue(ctx, hourglass.PendingDueParams{Until: far, Limit: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TimersDue(ctx, hourglass.PendingDueParams{Until: far, Limit: 100}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemindersDue(ctx, hourglass.PendingDueParams{Until: far, Limit: 100}); err != nil {
		t.Fatal(err)
	}
	due, err := s.DueDeliveries(ctx, hourglass.DueDeliveriesParams{Until: far, Limit: 20})
	if err != nil {
		t.Fatal(err)
	}
	var dids []int64
	for _, d := range due {
		dids = append(dids, d.ID)
	}
	if _, err := s.PendingDeliveries(ctx, dids); err != nil {
		t.Fatal(err)
	}
	for i, d := range due {
		r := hourglass.AttemptResult{ID: d.ID, Attempts: 1, OK: i%2 == 0, Error: "HTTP 503", RetryAt: far}
		wg.Go(func() {
			if _, err := s.RecordAttempt(ctx, r); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	// The cluster feed: the due items another process's creates announced.
	announced := append(slices.Clone(ids), timers...)
	for _, id := range ids {
		announced = append(announced, hourglass.ReminderIDBase+id)
	}
	if _, err := s.dueByID(ctx, announced); err != nil {
		t.Fatal(err)
	}
	// The timer_requests applier: arms and cancels a shop inserted.
	if _, err := s.pool.Exec(ctx, `INSERT INTO timer_requests (timer_key, action, delay_ms)
SELECT 'r' || (g % 24), CASE WHEN g % 3 = 0 THEN 'cancel' ELSE 'arm' END, 3600000 FROM generate_series(1, 48) g`); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, err := s.ApplyTimerRequests(ctx, hourglass.TimerRequestsParams{Limit: 12, Room: hourglass.NoTimerLimit}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := s.OutboxBatch(ctx, 100, hourglass.Parts{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.OutboxDone(ctx, out); err != nil {
		t.Fatal(err)
	}
}

// checkPreparedPlans explains the generic plan of each statement prepared
// on c (EXPLAIN EXECUTE with NULL arguments: a generic plan does not look
// at them) and reports those that read a growing table whole. It returns
// how many it checked.
func checkPreparedPlans(t *testing.T, c *pgxpool.Conn) int {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	rows, err := c.Query(ctx, `SELECT name, statement, cardinality(parameter_types) FROM pg_prepared_statements`)
	if err != nil {
		t.Fatal(err)
	}
	type prepared struct {
		name, sql string
		params    int
	}
	var all []prepared
	for rows.Next() {
		var p prepared
		if err := rows.Scan(&p.name, &p.sql, &p.params); err != nil {
			t.Fatal(err)
		}
		all = append(all, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, p := range all {
		args := strings.TrimSuffix(strings.Repeat("NULL, ", p.params), ", ")
		if args != "" {
			args = "(" + args + ")"
		}
		plan := explain(t, c, `EXECUTE `+p.name+args)
		if seqScanOfRows.MatchString(plan) {
			t.Errorf("a generic plan reads a table whole:\n%s\n%s", p.sql, plan)
		}
	}
	return len(all)
}
