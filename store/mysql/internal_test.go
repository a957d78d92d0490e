package mysql

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/internal/batch"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/internal/writer"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

func TestServerVersions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		version string
		mariaDB bool
		ok      bool
	}{
		{"8.0.36", false, true},
		{"8.4.2-commercial", false, true},
		{"9.1.0", false, true},
		{"5.7.44-log", false, false},
		{"10.11.19-MariaDB-0+deb12u1", true, true},
		{"10.6.0-MariaDB", true, true},
		{"10.5.23-MariaDB-log", true, false},
		{"5.5.5-10.4.32-MariaDB", true, false},
		{"11.4.2-MariaDB", true, true},
	} {
		v := parseVersion(tt.version)
		err := v.supported("db:3306")
		if v.mariaDB != tt.mariaDB || (err == nil) != tt.ok {
			t.Errorf("%s: mariaDB=%v, supported=%v; want %v, %v", tt.version, v.mariaDB, err, tt.mariaDB, tt.ok)
		}
		if err != nil && (strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "too old")) {
			t.Errorf("%s: %q is not one line saying the server is too old", tt.version, err)
		}
	}
}

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	got := splitStatements("-- a comment; with a semicolon;\nCREATE TABLE a (\n\tx INT -- inline\n);\n\nINSERT INTO a VALUES (1);\nSELECT 1")
	if len(got) != 3 || !strings.HasPrefix(got[0], "CREATE TABLE a") || got[1] != "INSERT INTO a VALUES (1)" || got[2] != "SELECT 1" {
		t.Fatalf("split = %q", got)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, st := range splitStatements(m.SQL) {
			if strings.Contains(st, ";") {
				t.Errorf("migration %d: statement holds a ';': %q", m.Version, st)
			}
		}
	}
}

// TestBrokenWriteDoesNotFailItsBatch: when one write of a group commit
// fails for a reason that is not a domain refusal, the batch is rolled back
// and each write is retried alone: the good ones commit and only the broken
// one gets the error.
func TestBrokenWriteDoesNotFailItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: mytest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	items := []hourglass.Item{{SKU: "A", Quantity: 1}}
	good := func() *batch.Op {
		return &batch.Op{Kind: batch.Create, Create: hourglass.CreateOrderParams{UserID: "u", Items: items, Timeout: time.Minute},
			Items: stored.EncodeItems(items)}
	}
	bad := good()
	bad.Items = strings.Repeat("x", 70000) // longer than a TEXT column
	ops := []*batch.Op{good(), bad, good()}
	// Queue all three at once, so one writer takes them as one batch.
	s.w.SubmitAll(ctx, writer.Normal, ops)
	for i, o := range ops {
		r := o.Res
		if o == bad {
			if r.Err == nil || hourglass.ErrorCode(r.Err) != hourglass.CodeInternal {
				t.Fatalf("the broken write returned %v, want an internal error", r.Err)
			}
			continue
		}
		if r.Err != nil || !r.Created {
			t.Fatalf("good write %d failed with its batch: %v", i, r.Err)
		}
	}
	p, err := s.Product(ctx, "A")
	if err != nil || p.Available != 8 || p.Reserved != 2 {
		t.Fatalf("product %+v, %v: want the two good reservations only", p, err)
	}
}

// TestMigrationsRerunnable: every migration runs again on a database that
// has it (a migration interrupted after some of its statements is
// completed by the next start), ALTER TABLE … ADD COLUMN included.
func TestMigrationsRerunnable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := mytest.NewDatabase(t)
	if _, err := Migrate(ctx, Config{URL: url}); err != nil {
		t.Fatal(err)
	}
	db, _, err := connect(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tg, err := newTarget(ctx, db, "rerun")
	if err != nil {
		t.Fatal(err)
	}
	defer tg.conn.Close()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if err := tg.Apply(ctx, m); err != nil {
			t.Errorf("migration %d again: %v", m.Version, err)
		}
	}
}

// TestTimerOpsShareABatch: timer writes queued together are decided in one
// transaction in queue order, as if called one after the other: the same
// key armed twice is created once and re-armed, a refused arm or cancel
// fails alone, a fire and a re-arm of the same timer both happen, and the
// outbox holds each timer still scheduled once, at its last fire time.
func TestTimerOpsShareABatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	var (
		mu      sync.Mutex
		batches []int
	)
	s, err := Open(ctx, Config{URL: mytest.NewDatabase(t), Clock: clock, Outbox: true, Observe: func(writes int, _ time.Duration) {
		mu.Lock()
		batches = append(batches, writes)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old, _, err := s.ArmTimer(ctx, hourglass.ArmTimerParams{Key: "old", Delay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	now := clock.Now()
	arm := func(key string, delay time.Duration, hash string, webhook int64) *batch.Op {
		return &batch.Op{Kind: batch.Arm, Arm: hourglass.ArmTimerParams{Key: key, Delay: delay, RequestHash: []byte(hash), WebhookID: webhook}}
	}
	cancel := func(key string) *batch.Op { return &batch.Op{Kind: batch.Cancel, Key: key} }
	ops := []*batch.Op{
		arm("k", time.Minute, "a", 0),
		arm("k", 2*time.Minute, "b", 0),
		arm("k", 2*time.Minute, "b", 0), // the same request again: unchanged
		arm("bad", time.Minute, "", 999),
		arm("c", time.Minute, "", 0),
		cancel("c"),
		cancel("nope"),
		{Kind: batch.Fire, IDs: []int64{old.ID}},
		arm("old", time.Hour, "r", 0),
	}
	mu.Lock()
	batches = nil
	mu.Unlock()
	s.w.SubmitAll(ctx, writer.Normal, ops) // one writer takes them all
	res := make([]batch.Result, len(ops))
	for i, o := range ops {
		res[i] = o.Res
	}
	mu.Lock()
	if !slices.Equal(batches, []int{len(ops)}) {
		t.Errorf("group commits of %v writes, want one of %d", batches, len(ops))
	}
	mu.Unlock()
	k := res[0].Timer
	if res[0].Err != nil || !res[0].Created || !hourglass.IsTimerID(k.ID) || !k.FireAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("first arm of k: %+v", res[0])
	}
	if r := res[1]; r.Err != nil || r.Created || r.Timer.ID != k.ID || !r.Timer.FireAt.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("second arm of k: %+v, want k (%d) re-armed at +2m", r, k.ID)
	}
	if r := res[2]; r.Err != nil || r.Created || r.Timer.ID != k.ID || !r.Timer.FireAt.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("repeated arm of k: %+v", r)
	}
	if r := res[3]; hourglass.ErrorCode(r.Err) != hourglass.CodeInvalidArgument {
		t.Fatalf("arm naming no webhook: %v, want invalid_argument", r.Err)
	}
	if r := res[4]; r.Err != nil || !r.Created || r.Timer.Status != hourglass.TimerScheduled {
		t.Fatalf("arm of c: %+v", r)
	}
	if r := res[5]; r.Err != nil || r.Timer.Status != hourglass.TimerCancelled || r.Timer.ID != res[4].Timer.ID {
		t.Fatalf("cancel of c: %+v", r)
	}
	if r := res[6]; hourglass.ErrorCode(r.Err) != hourglass.CodeNotFound {
		t.Fatalf("cancel of an unknown key: %v, want not_found", r.Err)
	}
	if r := res[7]; r.Err != nil || len(r.Fired) != 1 || r.Fired[0].ID != old.ID {
		t.Fatalf("fire of old: %+v", r)
	}
	if r := res[8]; r.Err != nil || r.Created || r.Timer.ID != old.ID || r.Timer.Status != hourglass.TimerScheduled || !r.Timer.FiredAt.IsZero() {
		t.Fatalf("re-arm of old after its fire: %+v", r)
	}
	for key, want := range map[string]hourglass.Timer{"k": res[2].Timer, "c": res[5].Timer, "old": res[8].Timer} {
		got, err := s.Timer(ctx, key)
		if err != nil || got.ID != want.ID || got.Status != want.Status || !got.FireAt.Equal(want.FireAt) || !bytes.Equal(got.Payload, want.Payload) {
			t.Errorf("stored %s: %+v, %v; want %+v", key, got, err, want)
		}
	}
	if _, err := s.Timer(ctx, "bad"); hourglass.ErrorCode(err) != hourglass.CodeNotFound {
		t.Errorf("the refused arm stored its timer: %v", err)
	}
	if evs, err := s.OrderEvents(ctx, old.ID); err != nil || len(evs) != 1 || evs[0].Type != hourglass.EventTimerFired {
		t.Errorf("events of old: %v, %v; want one timer.fired", evs, err)
	}
	out, err := s.OutboxBatch(ctx, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []hourglass.DueItem{{ID: old.ID, At: now.Add(time.Hour)}, {ID: k.ID, At: now.Add(2 * time.Minute)}}
	slices.SortFunc(want, func(a, b hourglass.DueItem) int { return cmp.Compare(a.ID, b.ID) })
	if !slices.EqualFunc(out, want, func(a, b hourglass.DueItem) bool { return a.ID == b.ID && a.At.Equal(b.At) }) {
		t.Errorf("outbox %v, want %v (c is cancelled)", out, want)
	}
}

// TestTimerBatchOverMaxAllowedPacket: a group commit whose arms' payloads
// (and then whose fires' event bodies) add up to more than the server's
// max_allowed_packet still commits as one transaction, its rows split over
// several statements.
func TestTimerBatchOverMaxAllowedPacket(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("sends some 64 MiB of payloads and event bodies")
	}
	ctx := context.Background()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	var (
		mu      sync.Mutex
		batches []int
	)
	s, err := Open(ctx, Config{URL: mytest.NewDatabase(t), Clock: clock, Observe: func(writes int, _ time.Duration) {
		mu.Lock()
		batches = append(batches, writes)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var packet int64
	if err := s.db.QueryRowContext(ctx, `SELECT @@max_allowed_packet`).Scan(&packet); err != nil {
		t.Fatal(err)
	}
	// Valid JSON full of characters that double when inlined.
	payload := []byte(`{"x":"` + strings.Repeat(`\"`, hourglass.MaxTimerPayload/2-8) + `"}`)
	n := int(packet/int64(len(payload))) + 1 // each inlined as about twice its length
	if n > s.cfg.MaxBatch {
		t.Skipf("max_allowed_packet %d needs more than a batch of %d arms to exceed", packet, s.cfg.MaxBatch)
	}
	ops := make([]*batch.Op, n)
	for i := range ops {
		ops[i] = &batch.Op{Kind: batch.Arm, Arm: hourglass.ArmTimerParams{Key: fmt.Sprintf("t%04d", i), Payload: payload}}
	}
	s.w.SubmitAll(ctx, writer.Normal, ops)
	ids := make([]int64, n)
	for i, o := range ops {
		r := o.Res
		if r.Err != nil || !r.Created {
			t.Fatalf("arm %d: %+v", i, r.Err)
		}
		ids[i] = r.Timer.ID
	}
	fired, err := s.FireTimers(ctx, ids)
	if err != nil || len(fired) != n {
		t.Fatalf("fired %d of %d: %v", len(fired), n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(batches, []int{n, 1}) {
		t.Fatalf("group commits of %v writes, want %d arms in one, then the fire", batches, n)
	}
}
