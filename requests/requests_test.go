package requests_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/requests"
	"github.com/hourglass/hourglass/retention"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/txtimer"
)

// announcer records what the store's due feed announces.
type announcer struct {
	mu        sync.Mutex
	scheduled []hourglass.DueItem
	cancelled []int64
	changed   chan struct{}
}

func newAnnouncer() *announcer { return &announcer{changed: make(chan struct{}, 1000)} }

func (a *announcer) follow(u hourglass.DueUpdate) {
	a.mu.Lock()
	a.scheduled = append(a.scheduled, u.Due...)
	a.cancelled = append(a.cancelled, u.Gone...)
	a.mu.Unlock()
	if len(u.Due)+len(u.Gone) > 0 { // not a Reload
		a.changed <- struct{}{}
	}
}

// observer records what the applier counted.
type observer struct {
	mu                sync.Mutex
	applied, rejected int
	lags              []time.Duration
}

func (o *observer) TimerRequestsApplied(applied, rejected int, lags []time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.applied += applied
	o.rejected += rejected
	o.lags = append(o.lags, lags...)
}

// TestAppliesCommittedRequests: on PostgreSQL, a request committed by the
// shop is applied and announced on the store's due feed (which the engine
// follows) within seconds, woken by the NOTIFY, not a poll, and counted
// with its lag; a rejected one is counted.
func TestAppliesCommittedRequests(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(t.Context(), postgres.Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	shop, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer shop.Close()
	ann, obs := newAnnouncer(), &observer{}
	feedCtx, stopFeed := context.WithCancel(t.Context())
	defer stopFeed()
	s.WatchDue(feedCtx, ann.follow) // as the engine follows it
	// A poll far away: only the notification can wake it in time.
	a, err := requests.New(requests.Config{Store: s, Observer: obs, PollInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	table := txtimer.Table{Name: "public.timer_requests", Dialect: txtimer.Postgres}
	tx, err := shop.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Arm(t.Context(), tx, txtimer.Arm{Key: "order:1", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(t.Context(), `INSERT INTO public.timer_requests (timer_key, action) VALUES ('x', 'snooze')`); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ann.changed:
	case <-time.After(5 * time.Second):
		t.Fatal("the armed timer was not announced on the due feed within 5 s of the commit")
	}
	took := time.Since(committed)
	tm, err := s.Timer(t.Context(), "order:1")
	if err != nil {
		t.Fatal(err)
	}
	ann.mu.Lock()
	got := ann.scheduled
	ann.mu.Unlock()
	if len(got) != 1 || got[0].ID != tm.ID || !got[0].At.Equal(tm.FireAt) {
		t.Fatalf("announced %v; want timer %d at %s", got, tm.ID, tm.FireAt)
	}
	// The store announces inside its apply; the applier counts after the
	// apply returns, so the count may follow the announcement.
	testenv.Eventually(t, 5*time.Second, "the applier to count 1 applied, 1 rejected and 2 lags", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return obs.applied == 1 && obs.rejected == 1 && len(obs.lags) == 2
	})
	t.Logf("announced %s after the commit", took)
}

// failingStore fails its first applies, then has nothing to apply.
type failingStore struct {
	hourglass.TimerRequestStore
	mu    sync.Mutex
	calls int
}

func (f *failingStore) TimerRequestsWritten() <-chan struct{} { return nil }
func (f *failingStore) ApplyTimerRequests(context.Context, hourglass.TimerRequestsParams) (hourglass.TimerRequestsApplied, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= 2 {
		return hourglass.TimerRequestsApplied{}, errors.New("database down")
	}
	return hourglass.TimerRequestsApplied{}, nil
}

// TestRetriesAfterAFailure: a failed transaction is tried again after a
// backoff, and Run keeps going.
func TestRetriesAfterAFailure(t *testing.T) {
	t.Parallel()
	f := &failingStore{}
	a, err := requests.New(requests.Config{Store: f, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := a.Run(ctx); err != nil {
		t.Fatalf("Run = %v; want nil when ctx ends", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls < 4 {
		t.Errorf("%d calls in 2 s; want the failures retried and polling to go on", f.calls)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if _, err := requests.New(requests.Config{}); err == nil {
		t.Error("New without a Store accepted")
	}
	if _, err := requests.New(requests.Config{Store: &failingStore{}, Batch: -1}); err == nil {
		t.Error("a negative Batch accepted")
	}
}

// TestTimerMaxHoldsForRequests: with --timer-max 5 (retention.TimerLimit,
// which bounds PUT too), 24 arms of new keys written by the shop leave 5
// timers, the others rejected with PUT's 409 reason; before, the applier
// knew no limit and held all 24 (issue 37).
func TestTimerMaxHoldsForRequests(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(t.Context(), postgres.Config{URL: url, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	shop, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer shop.Close()
	limit, err := retention.LimitTimers(s, retention.TimerLimitConfig{Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := limit.ArmTimer(t.Context(), hourglass.ArmTimerParams{Key: "api-1", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	table := txtimer.Table{Name: "public.timer_requests", Dialect: txtimer.Postgres}
	for i := range 24 {
		if err := table.Arm(t.Context(), shop, txtimer.Arm{Key: fmt.Sprintf("shop-%d", i), Delay: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	obs := &observer{}
	a, err := requests.New(requests.Config{Store: s, Observer: obs, Limit: limit, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		obs.mu.Lock()
		n := obs.applied + obs.rejected
		obs.mu.Unlock()
		if n == 24 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 24 requests applied or rejected in 10 s", n)
		}
		testenv.Until(t.Context(), time.Now().Add(10*time.Millisecond))
	}
	cancel()
	<-done
	counts, err := s.TimerCounts(t.Context())
	if err != nil || counts[hourglass.TimerScheduled] != 5 || obs.rejected != 20 {
		t.Fatalf("timers %v, %v, %d rejected; want 5 timers (--timer-max 5) and 20 rejected", counts, err, obs.rejected)
	}
	// The API's next create is refused too: the applier counted its creates.
	if _, _, err := limit.ArmTimer(t.Context(), hourglass.ArmTimerParams{Key: "api-2", Delay: time.Hour}); hourglass.ErrorCode(err) != hourglass.CodeLimitExceeded {
		t.Fatalf("an API create after the requests filled --timer-max: %v; want limit_exceeded", err)
	}
	rej, err := s.RejectedTimerRequests(t.Context(), 0, 100)
	if err != nil || len(rej) != 20 || !strings.Contains(rej[0].Reason, "--timer-max") {
		t.Fatalf("rejected %d, %v; want 20 naming --timer-max", len(rej), err)
	}
}
