package sqlpoll

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
)

// memStore is an in-memory order table: pending orders by id, read as the
// SQLite store reads them (pending, deadline <= until, strictly after the
// cursor, ordered by deadline then id). It records every read.
type memStore struct {
	mu      sync.Mutex
	pending map[int64]int64 // id → deadline (unix ms)
	reads   []read
	failAt  int // fail the failAt-th read (1-based); 0 never
}

type read struct {
	after, afterID, until int64
	limit                 int
}

func (m *memStore) PendingDue(_ context.Context, p hourglass.PendingDueParams) ([]hourglass.DueItem, error) {
	after, afterID, until, limit := p.After, p.AfterID, p.Until, p.Limit
	m.mu.Lock()
	defer m.mu.Unlock()
	r := read{hourglass.UnixMilli(after), afterID, hourglass.UnixMilli(until), limit}
	m.reads = append(m.reads, r)
	if len(m.reads) == m.failAt {
		return nil, errors.New("disk I/O error (simulated)")
	}
	var out []hourglass.DueItem
	for id, d := range m.pending {
		if d <= r.until && (d > r.after || (d == r.after && id > r.afterID)) {
			out = append(out, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(d)})
		}
	}
	slices.SortFunc(out, func(a, b hourglass.DueItem) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	return out[:min(limit, len(out))], nil
}

// closeOrders is the engine's delivery against memStore: each order still
// pending is closed, once.
func (m *memStore) closeOrders(ids []int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		delete(m.pending, id)
	}
}

func TestScan(t *testing.T) {
	t.Parallel()
	const now = 1_700_000_010_000 // unix ms of the scan
	tests := []struct {
		name      string
		pending   map[int64]int64 // id → deadline relative to now
		batch     int
		failRead  int  // the read that fails (1-based), 0 none
		failAfter int  // deliveries that succeed before one fails, -1 none
		close     bool // deliveries close the orders (the engine's deliver)
		wantErr   string
		delivered [][]int64 // the batches delivered, in order
		reads     int
	}{
		{
			name:      "nothing due",
			pending:   map[int64]int64{1: 1, 2: 500},
			batch:     10,
			failAfter: -1,
			reads:     1,
		},
		{
			name:      "due now is delivered, due in 1 ms is not",
			pending:   map[int64]int64{1: 0, 2: 1, 3: -1},
			batch:     10,
			failAfter: -1,
			delivered: [][]int64{{3, 1}},
			reads:     1,
		},
		{
			name:      "pages by deadline then id, cursor inside equal deadlines",
			pending:   map[int64]int64{5: -10, 4: -10, 3: -10, 9: -20, 1: -5, 7: 3},
			batch:     2,
			failAfter: -1,
			delivered: [][]int64{{9, 3}, {4, 5}, {1}},
			reads:     3,
		},
		{
			name:      "a full last page costs one more, empty, read",
			pending:   map[int64]int64{1: -3, 2: -2, 3: -1, 4: 0},
			batch:     2,
			failAfter: -1,
			delivered: [][]int64{{1, 2}, {3, 4}},
			reads:     3,
		},
		{
			name:      "closing deliveries do not change the cursor's walk",
			pending:   map[int64]int64{1: -3, 2: -2, 3: -1, 4: 0, 5: 0},
			batch:     2,
			failAfter: -1,
			close:     true,
			delivered: [][]int64{{1, 2}, {3, 4}, {5}},
			reads:     3,
		},
		{
			name:      "a failed delivery ends the scan without error",
			pending:   map[int64]int64{1: -3, 2: -2, 3: -1, 4: 0},
			batch:     2,
			failAfter: 0,
			delivered: [][]int64{{1, 2}},
			reads:     1,
		},
		{
			name:      "a failed second delivery ends the scan",
			pending:   map[int64]int64{1: -3, 2: -2, 3: -1, 4: 0, 5: 0},
			batch:     2,
			failAfter: 1,
			delivered: [][]int64{{1, 2}, {3, 4}},
			reads:     2,
		},
		{
			name:      "a failed read is returned",
			pending:   map[int64]int64{1: -3, 2: -2, 3: -1},
			batch:     2,
			failRead:  2,
			failAfter: -1,
			wantErr:   "sqlpoll: read due orders: disk I/O error (simulated)",
			delivered: [][]int64{{1, 2}},
			reads:     2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m := &memStore{pending: map[int64]int64{}, failAt: tt.failRead}
			for id, d := range tt.pending {
				m.pending[id] = now + d
			}
			s := &Scheduler{store: m, clock: hourglasstest.NewClock(hourglass.FromUnixMilli(now)), log: discard(), batch: tt.batch}
			var got [][]int64
			err := s.scan(context.Background(), func(_ context.Context, due []hourglass.DueItem) error {
				ids := make([]int64, len(due))
				for i, tm := range due {
					ids[i] = tm.ID
					if hourglass.UnixMilli(tm.At) > now {
						t.Errorf("order %d due at %d delivered at %d", tm.ID, hourglass.UnixMilli(tm.At), now)
					}
				}
				got = append(got, ids)
				if tt.failAfter >= 0 && len(got) > tt.failAfter {
					return errors.New("close failed (simulated)")
				}
				if tt.close {
					m.closeOrders(ids)
				}
				return nil
			})
			if (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
				t.Errorf("scan() = %v, want %q", err, tt.wantErr)
			}
			if !slices.EqualFunc(got, tt.delivered, slices.Equal) {
				t.Errorf("delivered %v, want %v", got, tt.delivered)
			}
			if len(m.reads) != tt.reads {
				t.Errorf("%d reads, want %d: %v", len(m.reads), tt.reads, m.reads)
			}
			for _, r := range m.reads {
				if r.until != now || r.limit != tt.batch {
					t.Errorf("read %+v: want until %d and limit %d", r, now, tt.batch)
				}
			}
		})
	}
}

// TestRunRetriesAndFails checks Run end to end over memStore: a failed
// delivery is retried by a later scan, and a failed read ends Run with the
// error; cancelling ctx makes Run return nil.
func TestRunRetriesAndFails(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(time.Now())
	m := &memStore{pending: map[int64]int64{1: hourglass.UnixMilli(clock.Now()) - 5}}
	s := &Scheduler{store: m, clock: clock, log: discard(), interval: 10 * time.Millisecond, batch: 10}
	var attempts int
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := runAdvancing(t, ctx, s, clock, func(_ context.Context, due []hourglass.DueItem) error {
		attempts++
		if attempts == 1 {
			return errors.New("close failed (simulated)")
		}
		m.closeOrders([]int64{due[0].ID})
		m.mu.Lock()
		m.failAt = len(m.reads) + 2 // the read of the scan after next fails
		m.mu.Unlock()
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "sqlpoll: read due orders") {
		t.Fatalf("Run() = %v, want the read error", err)
	}
	if attempts != 2 {
		t.Errorf("%d delivery attempts, want 2 (one failed, one retried)", attempts)
	}
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	m.failAt = 0
	if err := s.Run(ctx, func(context.Context, []hourglass.DueItem) error { return nil }); err != nil {
		t.Errorf("Run with an ended ctx = %v, want nil", err)
	}
}

// runAdvancing runs s.Run until it returns, moving clock on by the longest
// poll interval (PollInterval + 10%) each time Run waits for its next scan.
func runAdvancing(t *testing.T, ctx context.Context, s *Scheduler, clock *hourglasstest.Clock, deliver hourglass.Deliver) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, deliver) }()
	for {
		waiting := make(chan error, 1)
		bctx, stopBlock := context.WithCancel(ctx)
		go func() { waiting <- clock.BlockUntil(bctx, 1) }()
		select {
		case err := <-done:
			stopBlock()
			<-waiting
			return err
		case err := <-waiting:
			stopBlock()
			if err != nil { // ctx ended: so does Run
				return <-done
			}
			clock.Advance(s.interval + s.interval/10)
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
