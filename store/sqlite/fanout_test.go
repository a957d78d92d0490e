package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"zombiezen.com/go/sqlite"
	"zombiezen.com/go/sqlite/sqlitex"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// webhooks creates n webhooks subscribed to every event type.
func webhooks(t *testing.T, s *Store, n int) []hourglass.Webhook {
	t.Helper()
	var out []hourglass.Webhook
	for i := range n {
		w, err := s.CreateWebhook(context.Background(), hourglass.WebhookParams{URL: fmt.Sprintf("https://hooks.example.com/%d", i),
			Events: []hourglass.EventType{hourglass.EventTypeAll}, Secret: "0123456789abcdef"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, w)
	}
	return out
}

// waitDeliveries waits until want deliveries are pending and nothing is
// left in fanout_pending, or fails after 10 s.
func waitDeliveries(t *testing.T, s *Store, want int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d deliveries pending and no fan-out deferred", want), func() bool {
		pending, _, err := s.DeliveryCounts(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		left := 0
		if err := s.read(context.Background(), func(conn *sqlite.Conn) error {
			_, err := step(conn.Prep(`SELECT count(*) FROM fanout_pending`), func(st *sqlite.Stmt) { left = st.ColumnInt(0) })
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return pending == want && left == 0
	})
}

// TestBurstFanOutDeferred: a close batch with more closes queued behind it,
// and one of a full engine batch (fanout.BurstCloses) or more, write their
// events but leave their deliveries to the background fan-out (seen with
// the loop held); a small close with nothing behind it fans out at once;
// every closed order's event reaches every webhook, each once.
func TestBurstFanOutDeferred(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	release := make(chan struct{})
	var once sync.Once
	s, err := Open(Config{Dir: t.TempDir(), beforeFanOut: func() { <-release }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before Close
	webhooks(t, s, 3)
	const batch, small = 600, 10 // two batches weigh more than urgentPerCommit: one per commit
	first := seedBurst(t, s, "HOT", 2*batch+small, time.Now().Add(-time.Second))
	closeRange := func(from, n int) error {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = first + int64(from+i)
		}
		closed, err := s.CloseOrders(ctx, ids)
		if err == nil && len(closed) != n {
			err = fmt.Errorf("closed %d of %d", len(closed), n)
		}
		return err
	}
	// Hold the writer so that both close batches queue up.
	hold := holdWriter(s)
	errs := make(chan error, 2)
	for b := range 2 {
		go func() { errs <- closeRange(b*batch, batch) }()
	}
	testenv.Eventually(t, 10*time.Second, "both close batches queued", func() bool { return s.w.Urgent() >= 2 })

	hold()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := closeRange(2*batch, small); err != nil {
		t.Fatal(err)
	}
	var notes, deliveries int
	if err := s.read(ctx, func(conn *sqlite.Conn) error {
		if _, err := step(conn.Prep(`SELECT count(*) FROM fanout_pending`), func(st *sqlite.Stmt) { notes = st.ColumnInt(0) }); err != nil {
			return err
		}
		_, err := step(conn.Prep(`SELECT count(*) FROM webhook_deliveries`), func(st *sqlite.Stmt) { deliveries = st.ColumnInt(0) })
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// (seedBurst writes orders without events: only closes have any.)
	if want := small * 3; notes != 2 || deliveries != want {
		t.Fatalf("%d deferred fan-outs and %d deliveries; want the two big batches' deferred and the small close's %d", notes, deliveries, want)
	}
	if n, err := s.FanoutPending(ctx); err != nil || n != 2 {
		t.Fatalf("FanoutPending = %d, %v; want 2", n, err)
	}
	once.Do(func() { close(release) })
	waitDeliveries(t, s, (2*batch+small)*3)
	if n, err := s.FanoutPending(ctx); err != nil || n != 0 {
		t.Fatalf("after the fan-out FanoutPending = %d, %v; want 0", n, err)
	}
}

// TestDeferredFanOutAfterRestart: a deferred fan-out left by a crash (the
// close committed, its deliveries not yet created) is completed when the
// store opens again.
func TestDeferredFanOutAfterRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	webhooks(t, s, 2)
	first := seedBurst(t, s, "HOT", 10, time.Now().Add(-time.Second))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// What a deferring close batch commits, its events and the note,
	// written while no store has the file open: as after a crash right
	// after the close's commit (a store's own fan-out loop could look at
	// any moment, so the note is not written through one).
	conn, err := sqlite.OpenConn(filepath.Join(dir, FileNameDefault), sqlite.OpenReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlitex.ExecuteTransient(conn, "BEGIN IMMEDIATE", nil); err != nil {
		t.Fatal(err)
	}
	ins := conn.Prep(`INSERT INTO events (id, type, order_id, created_at) VALUES (?1, ?2, ?3, ?4)`)
	var seqs []int64
	for i := range 10 {
		ins.BindText(1, hourglass.NewEventID())
		ins.BindText(2, string(hourglass.EventFor(hourglass.StateClosed)))
		ins.BindInt64(3, first+int64(i))
		ins.BindInt64(4, hourglass.UnixMilli(time.Now()))
		if _, err := step(ins, nil); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, conn.LastInsertRowID())
	}
	row := conn.Prep(`INSERT INTO fanout_pending (first_seq, last_seq, type) VALUES (?1, ?2, ?3)`)
	row.BindInt64(1, seqs[0])
	row.BindInt64(2, seqs[len(seqs)-1])
	row.BindText(3, string(hourglass.EventFor(hourglass.StateClosed)))
	if _, err := step(row, nil); err != nil {
		t.Fatal(err)
	}
	if err := sqlitex.ExecuteTransient(conn, "COMMIT", nil); err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	// Open again, its fan-out held until the checks below are made.
	release := make(chan struct{})
	s, err = Open(Config{Dir: dir, beforeFanOut: func() { <-release }})
	if err != nil {
		close(release)
		t.Fatal(err)
	}
	defer s.Close()
	held := true
	defer func() {
		if held {
			close(release)
		}
	}()
	// Pruning keeps events whose fan-out is still to come, however old.
	if n, err := s.PruneEvents(ctx, time.Now().Add(time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("PruneEvents = %d, %v; want 0 pruned", n, err)
	}
	// No delivery exists yet (seedBurst writes no events).
	if before, _, err := s.DeliveryCounts(ctx); err != nil || before != 0 {
		t.Fatalf("DeliveryCounts = %d, %v; want 0 before the fan-out", before, err)
	}
	held = false
	close(release)
	waitDeliveries(t, s, 20) // 10 events x 2 webhooks
}
