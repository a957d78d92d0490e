package source_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/source"
)

// logBuffer is a log a test reads while the runner writes it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// TestBadRowsAmongGood: pending rows whose deadline or key hourglass
// cannot close by, written as a shop would (PostgreSQL's -infinity,
// MariaDB's zero dates under sql_mode=”), some before the start (read by
// the window and the sweeper) and some after (read by the tail), stop
// nothing: every good row closes on time, and each bad one is reported
// once (one WARN, counted by reason, listed) however often it is read,
// with the source_bad_rows alert's source naming the source.
func TestBadRowsAmongGood(t *testing.T) {
	for name, open := range shops() {
		t.Run(name, func(t *testing.T) {
			db, shop := open(t)
			shop.Create(t, true)
			shop.PutStock(t, "A", 1000)
			want := map[string]string{} // key → reason
			bad := func(key int64, deadline, reason string) {
				want[fmt.Sprint(shop.BadOrder(t, key, deadline))] = reason
			}
			var good []int64
			// Before the start: due ones among bad ones.
			good = append(good, shop.Order(t, "u", -time.Second, "A", 1))
			for dl, reason := range shop.BadDeadlines() {
				bad(0, dl, reason)
			}
			good = append(good, shop.Order(t, "u", 1500*time.Millisecond, "A", 1))
			bad(-5, shop.Now(), hourglass.BadKeyOutOfRange)

			obs := &observer{}
			logs := &logBuffer{}
			r := runWith(t, source.Config{Store: db, Sources: []hourglass.Source{shop.Source("shop_orders")}, Observer: obs,
				SweepInterval: time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil))})

			// After it: the tail meets bad rows between good ones.
			good = append(good, shop.Order(t, "u", time.Second, "A", 1))
			bad(0, shop.BadDeadlinesList()[0], shop.BadDeadlines()[shop.BadDeadlinesList()[0]])
			good = append(good, shop.Order(t, "u", time.Second, "A", 1))

			testenv.EventuallyEvery(t, 15*time.Second, 50*time.Millisecond, "every good row closed", func() bool {
				for _, id := range good {
					if shop.Status(t, id) != "CLOSED" {
						return false
					}
				}
				return true
			})
			for i, id := range good {
				evs, err := db.OrderEvents(t.Context(), hourglass.SourceEventOrderID("shop_orders", id))
				if err != nil || len(evs) != 1 {
					t.Fatalf("row %d: events %v, %v; want one", id, evs, err)
				}
				var body struct {
					Deadline time.Time `json:"deadline"`
					ClosedAt time.Time `json:"closed_at"`
				}
				if err := json.Unmarshal(evs[0].Body, &body); err != nil {
					t.Fatalf("row %d: event %s: %v", id, evs[0].Body, err)
				}
				// The first was overdue at the start; the others due after it.
				if late := body.ClosedAt.Sub(body.Deadline); i > 0 && (late < 0 || late > 500*time.Millisecond) {
					t.Errorf("row %d closed %s after its deadline; want on time", id, late)
				}
			}
			for _, id := range slices.Collect(maps.Keys(want)) {
				var st string
				shop.DB.QueryRowContext(t.Context(), shop.Bind("SELECT status FROM "+shop.T("orders")+" WHERE id = ?"), id).Scan(&st)
				if st != "UNPAID" {
					t.Errorf("bad row %s is %s; want it left UNPAID", id, st)
				}
			}

			// Each bad row reported once, however many looks and reads met it.
			testenv.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, "every bad row reported", func() bool {
				return logs.count("skipping a pending row") >= len(want)
			})
			time.Sleep(2500 * time.Millisecond) // two more looks, several window loads and sweeps
			if n := logs.count("skipping a pending row"); n != len(want) {
				t.Errorf("%d WARN lines for %d bad rows; want one each", n, len(want))
			}
			byReason := map[string]int{}
			for _, reason := range want {
				byReason[reason]++
			}
			obs.mu.Lock()
			for _, reason := range hourglass.BadSourceReasons() {
				if obs.bad[reason] != byReason[reason] {
					t.Errorf("counted %d bad rows of reason %s; want %d", obs.bad[reason], reason, byReason[reason])
				}
			}
			obs.mu.Unlock()
			if got := r.BadRows(time.Now()); !slices.Equal(got, []string{"shop_orders"}) {
				t.Errorf("BadRows (the alert's source) = %v; want shop_orders", got)
			}
			list, total, ok := r.BadRowList("shop_orders")
			listed := map[string]string{}
			for _, b := range list {
				listed[b.Key] = b.Reason
			}
			if !ok || total != int64(len(want)) || !maps.Equal(listed, want) {
				t.Errorf("BadRowList = %+v, %d, %v; want %v", list, total, ok, want)
			}
			if st := r.Stats(time.Now()); st[0].BadRows != int64(len(want)) || len(st[0].BadRowList) != len(want) {
				t.Errorf("Stats: %d bad rows, %d listed; want %d", st[0].BadRows, len(st[0].BadRowList), len(want))
			}
			if n := logs.count("level=ERROR"); n != 0 {
				t.Errorf("%d ERROR lines; want none", n)
			}
			if n := logs.count("failed; retrying"); n != 0 {
				t.Errorf("%d failed reads in the log; want none:\n%s", n, logs.b.String())
			}
		})
	}
}
