package bulk_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/bulk"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestCancel100kTimersByPrefix (Full tier) is the figure: 100,000
// timers cancelled by one prefix filter, on SQLite, PostgreSQL and
// MariaDB, through the runner every node runs (pages of 500, each with its
// progress in one transaction): done within 60 s, every timer cancelled
// and none fired, none of the others touched; then a stop of a second
// action answers within 1 s and from its answer on no item is done. The
// figures are logged (run it on a quiet machine for them: uptime is
// logged beside).
func TestCancel100kTimersByPrefix(t *testing.T) {
	testenv.Require(t, testenv.Full)
	for _, kind := range []string{store.KindSQLite, store.KindPostgres, store.KindMySQL} {
		t.Run(kind, func(t *testing.T) {
			var url string
			switch kind {
			case store.KindSQLite:
				url = "sqlite://" + filepath.Join(t.TempDir(), "hourglass.db")
			case store.KindPostgres:
				url = pgtest.NewDatabase(t)
			case store.KindMySQL:
				url = mytest.NewDatabase(t)
			}
			db, err := store.Open(t.Context(), store.Options{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			testCancel100k(t, db)
		})
	}
}

func testCancel100k(t *testing.T, db hourglass.Database) {
	const n = 100_000
	ctx := t.Context()
	arm := func(prefix string, count int) time.Duration {
		start := time.Now()
		for i := 0; i < count; i += hourglass.MaxBulkIDs {
			items := make([]hourglass.BulkItem, 0, hourglass.MaxBulkIDs)
			for j := i; j < min(i+hourglass.MaxBulkIDs, count); j++ {
				items = append(items, hourglass.BulkItem{Kind: hourglass.BulkItemArmTimer, Arm: hourglass.ArmTimerParams{Key: fmt.Sprintf("%s%06d", prefix, j), Delay: time.Hour}})
			}
			res, err := db.ApplyBulk(ctx, items, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
		}
		return time.Since(start)
	}
	took := arm("coupon:spring:", n)
	arm("coupon:summer:", 1000)
	arm("coupon:autumn:", 20_000)
	t.Logf("armed %d timers in batches of 1,000: %s (%.0f/s); load %s", n, took.Round(time.Millisecond), n/took.Seconds(), load())

	r, err := bulk.New(bulk.Config{Store: db, Owner: "big-test", Lease: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRunner := context.WithCancel(ctx)
	defer stopRunner()
	go r.Run(runCtx)

	spec := bulk.Spec{Timers: &hourglass.TimerFilter{Status: hourglass.TimerScheduled, Prefix: "coupon:spring:"}}
	a := create(t, db, spec, 0)
	r.Wake()
	start := time.Now()
	got := wait(t, db, a.ID, 120*time.Second, func(a hourglass.BulkAction) bool { return a.State != hourglass.BulkRunning })
	took = time.Since(start)
	t.Logf("cancelled %d timers by prefix: %s (%.0f/s); load %s", got.Done, took.Round(time.Millisecond), float64(got.Done)/took.Seconds(), load())
	if got.State != hourglass.BulkDone || got.Done != n || got.Failed != 0 || got.Matched != n {
		t.Fatalf("finished: %+v", got)
	}
	if took > 60*time.Second {
		t.Errorf("took %s, want within 60 s", took)
	}
	c, err := db.TimerCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c[hourglass.TimerCancelled] != n || c[hourglass.TimerFired] != 0 || c[hourglass.TimerScheduled] != 21_000 {
		t.Fatalf("timer counts %v", c)
	}
	// A cancelled timer cannot fire: FireTimers of some of them, past
	// their time, fires none.
	ts, err := db.Timers(ctx, hourglass.TimerFilter{Prefix: "coupon:spring:", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, tm := range ts {
		ids = append(ids, tm.ID)
	}
	if fired, err := db.FireTimers(ctx, ids); err != nil || len(fired) != 0 {
		t.Fatalf("FireTimers of cancelled timers: %d fired, %v", len(fired), err)
	}

	// Stop: a second action (20,000 timers) stopped mid-way. Its rate is
	// bounded (4 s for them all) so that the stop comes before its end: at
	// full speed a quiet MariaDB cancelled all 20,000 in 0.64 s, between
	// the 2,000th and the stop.
	b := create(t, db, bulk.Spec{Timers: &hourglass.TimerFilter{Status: hourglass.TimerScheduled, Prefix: "coupon:autumn:"}}, 5000)
	r.Wake()
	wait(t, db, b.ID, 60*time.Second, func(a hourglass.BulkAction) bool { return a.Done >= 2000 })
	start = time.Now()
	stopped, err := db.StopBulkAction(ctx, b.ID)
	stopTook := time.Since(start)
	if err != nil || stopped.State != hourglass.BulkStopped {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
	t.Logf("stop answered in %s at %d done", stopTook.Round(time.Microsecond), stopped.Done)
	if stopTook > time.Second {
		t.Errorf("stop took %s, want within 1 s", stopTook)
	}
	time.Sleep(500 * time.Millisecond)
	after, _ := db.BulkAction(ctx, b.ID)
	c, _ = db.TimerCounts(ctx)
	if after.Done != stopped.Done || c[hourglass.TimerCancelled] != n+stopped.Done {
		t.Fatalf("after the stop: %d done (stopped at %d), %d cancelled", after.Done, stopped.Done, c[hourglass.TimerCancelled]-n)
	}
}

var seq atomic.Int64

func create(t *testing.T, db hourglass.BulkStore, spec bulk.Spec, rate int) hourglass.BulkAction {
	t.Helper()
	raw, _ := jsonOf(spec)
	a, created, err := db.CreateBulkAction(t.Context(), hourglass.BulkAction{ID: fmt.Sprintf("big%04d", seq.Add(1)), Action: hourglass.BulkCancelTimers,
		Reason: "test", Spec: raw, RunningKey: bulk.RunningKey(hourglass.BulkCancelTimers, spec), Rate: rate})
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	return a
}

func wait(t *testing.T, db hourglass.BulkStore, id string, within time.Duration, ok func(hourglass.BulkAction) bool) hourglass.BulkAction {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		a, err := db.BulkAction(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if ok(a) {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s: %+v", within, a)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// load is the machine's load average, for the figures.
func load() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return string(b[:len(b)-1])
}
