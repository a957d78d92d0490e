package writer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
)

// write is a test write: broken makes any transaction holding it fail.
type write struct {
	broken bool
	ran    int
	err    error
}

func (w *write) Fail(err error) { w.err = err }
func (w *write) Err() error     { return w.err }

var (
	errBroken = errors.New("broken write")
	errRace   = errors.New("deadlock")
	errDown   = errors.New("connection refused to 10.0.0.1")
)

// fake runs batches in memory: it fails with errRace the first races
// transactions, with errDown while down, and with errBroken when a broken
// write is in the batch.
type fake struct {
	mu    sync.Mutex
	races int
	down  bool
	txs   []int
	// hold, if set, holds each transaction until it is closed, after
	// telling held.
	hold, held chan struct{}
}

func (f *fake) Run(_ context.Context, ws []*write) (int, error) {
	f.mu.Lock()
	hold, held := f.hold, f.held
	f.mu.Unlock()
	if hold != nil {
		held <- struct{}{}
		<-hold
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.txs = append(f.txs, len(ws))
	switch {
	case f.down:
		return 0, errDown
	case f.races > 0:
		f.races--
		return 0, errRace
	}
	for _, w := range ws {
		if w.broken {
			return 0, errBroken
		}
	}
	for _, w := range ws {
		w.ran++
		w.err = nil
	}
	return len(ws), nil
}

func (f *fake) Classify(err error) Class {
	switch {
	case errors.Is(err, errRace):
		return Class{Kind: Retry, Reason: "deadlock"}
	case errors.Is(err, errDown):
		return Class{Kind: Unavailable}
	}
	return Class{Kind: OneWrite}
}

func setup(t *testing.T, f *fake, attempts int) (*Writer[*write], *[]string) {
	t.Helper()
	var (
		mu      sync.Mutex
		reasons []string
	)
	w := New(Config[*write]{
		Name: "test", Log: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBatch: 100,
		Retry: RetryPolicy{Attempts: attempts, Timeout: time.Minute}, ProbeInterval: time.Hour,
		ObserveRetry: func(r string) { mu.Lock(); reasons = append(reasons, r); mu.Unlock() },
	}, f)
	t.Cleanup(w.Close)
	return w, &reasons
}

func TestBatchOutcomes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		f        *fake
		attempts int
		broken   int // index of the broken write, -1 for none
		wantErr  func(i int, err error) bool
		wantTxs  int
		retries  int
	}{
		{"commits", &fake{}, 3, -1, func(_ int, err error) bool { return err == nil }, 1, 0},
		{"retried race", &fake{races: 2}, 3, -1, func(_ int, err error) bool { return err == nil }, 3, 2},
		// Every transaction races: the batch fails as one write's failure
		// would, and is bisected down to single writes.
		{"retries used up", &fake{races: 1 << 20}, 3, -1, func(_ int, err error) bool { return errors.Is(err, errRace) }, 3 * (1 + 2 + 4 + 8), 2 * 15},
		{"broken write bisected", &fake{}, 1, 5, func(i int, err error) bool { return (i == 5) == errors.Is(err, errBroken) }, 7, 0},
		{"unavailable not split", &fake{down: true}, 3, -1, func(_ int, err error) bool {
			return hourglass.ErrorCode(err) == hourglass.CodeUnavailable && err.Error() != "" && !errors.Is(err, errDown)
		}, 1, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, reasons := setup(t, tt.f, tt.attempts)
			ws := make([]*write, 8)
			for i := range ws {
				ws[i] = &write{broken: i == tt.broken}
			}
			errs := w.SubmitAll(context.Background(), Normal, ws)
			for i, err := range errs {
				if !tt.wantErr(i, err) {
					t.Errorf("write %d: %v", i, err)
				}
			}
			if got := len(tt.f.txs); got != tt.wantTxs {
				t.Errorf("%d transactions %v, want %d", got, tt.f.txs, tt.wantTxs)
			}
			if len(*reasons) != tt.retries {
				t.Errorf("retries %v, want %d", *reasons, tt.retries)
			}
		})
	}
}

func TestSkippedAndClosed(t *testing.T) {
	t.Parallel()
	f := &fake{}
	w, _ := setup(t, f, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Submit(ctx, Urgent, &write{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a write whose context ended: %v", err)
	}
	w.Close()
	if err := w.Submit(context.Background(), Low, &write{}); hourglass.ErrorCode(err) != hourglass.CodeUnavailable {
		t.Fatalf("a write after Close: %v", err)
	}
	if len(f.txs) != 0 {
		t.Fatalf("transactions %v, want none", f.txs)
	}
}

func TestHealthAndDeliveries(t *testing.T) {
	t.Parallel()
	f := &fake{down: true}
	w, _ := setup(t, f, 1)
	w.Submit(context.Background(), Normal, &write{})
	if hourglass.ErrorCode(w.Health()) != hourglass.CodeUnavailable {
		t.Fatalf("health after an unavailable batch: %v", w.Health())
	}
	f.mu.Lock()
	f.down = false
	f.mu.Unlock()
	if err := w.Submit(context.Background(), Normal, &write{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Health(); err != nil {
		t.Fatalf("health after a commit: %v", err)
	}
	select {
	case <-w.DeliveriesCreated():
	default:
		t.Fatal("no wake-up after a commit that created deliveries")
	}
}

// gatherRig is a writer over a fake with its gather observed: txs lists
// the transactions' sizes, submit queues n writes in a lane, taken waits
// until the writer begins to wait for more writes.
type gatherRig struct {
	f         *fake
	w         *Writer[*write]
	gathering chan struct{}
	txs       func() []int
	submit    func(lane Lane, n int) chan []error
	taken     func()
}

// newGatherRig starts a writer with cfg (its name, log, retry and probe
// filled in) over a fake.
func newGatherRig(t *testing.T, cfg Config[*write]) *gatherRig {
	f := &fake{}
	cfg.Name, cfg.Log = "test", slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Retry, cfg.ProbeInterval = RetryPolicy{Attempts: 1, Timeout: time.Minute}, time.Hour
	r := &gatherRig{f: f, w: New(cfg, f), gathering: make(chan struct{}, 1)}
	t.Cleanup(r.w.Close)
	r.w.gathering = func() { r.gathering <- struct{}{} } // set before any write: the loop reads it after a Take
	r.txs = func() []int { f.mu.Lock(); defer f.mu.Unlock(); return append([]int(nil), f.txs...) }
	r.submit = func(lane Lane, n int) chan []error {
		done := make(chan []error, 1)
		ws := make([]*write, n)
		for i := range ws {
			ws[i] = &write{}
		}
		go func() { done <- r.w.SubmitAll(context.Background(), lane, ws) }()
		return done
	}
	r.taken = func() {
		t.Helper()
		select {
		case <-r.gathering:
		case <-time.After(10 * time.Second):
			t.Fatal("the writer did not wait for more writes after a batch of several")
		}
	}
	return r
}

// holdNext holds the next transaction until release, which lets every
// later one run at once; the transaction tells r.f.held when it is held.
func (r *gatherRig) holdNext() (release func()) {
	r.f.mu.Lock()
	defer r.f.mu.Unlock()
	r.f.hold, r.f.held = make(chan struct{}), make(chan struct{}, 1)
	hold := r.f.hold
	return func() {
		r.f.mu.Lock()
		r.f.hold = nil
		r.f.mu.Unlock()
		close(hold)
	}
}

// TestGather: after a batch of several writes, a writer holding one write
// waits (Config.Gather) for the writes that keep coming, until its batch
// holds as many as the one before or is full; an urgent write ends the
// wait at once; after a batch of one, a lone write does not wait; Close
// ends a wait and commits what was taken. Gather is a minute, so a wait
// that should not happen shows as a test far slower than its bound.
func TestGather(t *testing.T) {
	t.Parallel()
	r := newGatherRig(t, Config[*write]{MaxBatch: 4, Gather: time.Minute})
	w, txs, submit, taken := r.w, r.txs, r.submit, r.taken

	<-submit(Normal, 3) // a batch of three: clients write concurrently
	first := submit(Normal, 1)
	taken()
	start := time.Now()
	rest := []chan []error{submit(Normal, 1), submit(Normal, 1)}
	for _, c := range append(rest, first) {
		<-c
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the third write committed %s after the wait began, want as it came (Gather is a minute)", took)
	}
	if got := txs(); !slices.Equal(got, []int{3, 3}) {
		t.Fatalf("transactions %v, want [3 3]: the lone write waits for the two that came, as many as the batch before", got)
	}

	<-submit(Normal, 4) // a full batch: the next waits until it is full
	first = submit(Normal, 1)
	taken()
	rest = []chan []error{submit(Normal, 1), submit(Normal, 1), submit(Normal, 1)}
	for _, c := range append(rest, first) {
		<-c
	}
	if got := txs(); !slices.Equal(got, []int{3, 3, 4, 4}) {
		t.Fatalf("transactions %v, want [3 3 4 4]: the lone write waits until the batch is full", got)
	}

	normal := submit(Normal, 1) // the last batch held 4: it waits
	taken()
	start = time.Now()
	<-submit(Urgent, 1)
	<-normal
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("an urgent write committed %s after it came, want at once (Gather is a minute)", took)
	}
	if got := txs(); !slices.Equal(got, []int{3, 3, 4, 4, 2}) {
		t.Fatalf("transactions %v, want [3 3 4 4 2]: the urgent write ends the wait and joins the batch", got)
	}

	<-submit(Urgent, 1) // a batch of one
	start = time.Now()
	<-submit(Normal, 1)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("a lone write after a batch of one committed after %s, want at once", took)
	}
	if got := txs(); !slices.Equal(got, []int{3, 3, 4, 4, 2, 1, 1}) {
		t.Fatalf("transactions %v, want [3 3 4 4 2 1 1]", got)
	}

	<-submit(Normal, 2)
	last := submit(Normal, 1) // waits for more
	taken()
	start = time.Now()
	w.Close()
	if errs := <-last; errs[0] != nil {
		t.Fatalf("the gathering write failed at Close: %v", errs[0])
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Close took %s with a write gathering, want at once (Gather is a minute)", took)
	}
	if got := txs(); !slices.Equal(got, []int{3, 3, 4, 4, 2, 1, 1, 2, 1}) {
		t.Fatalf("transactions %v, want [3 3 4 4 2 1 1 2 1]: Close ends the wait and commits what was taken", got)
	}
}

// TestGatherBack: a closed loop split into two groups, one committing while
// the other waits, becomes one: the batch after a commit gathers as many
// writes as that commit held and the writes that waited through it.
func TestGatherBack(t *testing.T) {
	t.Parallel()
	r := newGatherRig(t, Config[*write]{MaxBatch: 8, Gather: time.Minute})
	txs, submit, taken := r.txs, r.submit, r.taken

	<-submit(Normal, 2) // a batch of two: clients write concurrently
	release := r.holdNext()
	a := submit(Normal, 2) // group A: its transaction is held
	<-r.f.held
	b := submit(Normal, 1) // group B waits while A commits
	testenv.Eventually(t, time.Minute, "group B to wait in the queue", func() bool { return r.w.Len() == 1 })
	release()
	<-a
	taken() // B, waiting for A's clients
	back := []chan []error{submit(Normal, 1)}
	back = append(back, submit(Normal, 1))
	for _, c := range append(back, b) {
		<-c
	}
	if got := txs(); !slices.Equal(got, []int{2, 2, 3}) {
		t.Fatalf("transactions %v, want [2 2 3]: B's write waits for both of A's clients, 2 + 1", got)
	}

}

// TestGatherBackCountsAPIWrites: bookkeeping (Low) writes that waited
// through a commit are no client's: a batch of 2 held, one API write and
// two Low ones waiting, the next batch (those three) waits for no more.
func TestGatherBackCountsAPIWrites(t *testing.T) {
	t.Parallel()
	r := newGatherRig(t, Config[*write]{MaxBatch: 8, Gather: time.Minute})
	txs, submit := r.txs, r.submit

	<-submit(Normal, 2) // a batch of two: clients write concurrently
	release := r.holdNext()
	a := submit(Normal, 2)
	<-r.f.held
	waiting := []chan []error{submit(Normal, 1), submit(Low, 1), submit(Low, 1)}
	testenv.Eventually(t, time.Minute, "three writes to wait in the queue", func() bool { return r.w.Len() == 3 })
	release()
	<-a
	start := time.Now()
	for _, c := range waiting {
		<-c
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the batch after it committed %s later, want at once: 3 writes, as many as the batch before and the API write that waited (Gather is a minute)", took)
	}
	if got := txs(); !slices.Equal(got, []int{2, 2, 3}) {
		t.Fatalf("transactions %v, want [2 2 3]", got)
	}
}

// TestGatherShared: with Config.Shared, the writer gathers only while it
// reports other nodes on the database; a node alone commits a lone write
// at once after a batch of several.
func TestGatherShared(t *testing.T) {
	t.Parallel()
	var shared atomic.Bool
	r := newGatherRig(t, Config[*write]{MaxBatch: 4, Gather: time.Minute, Shared: shared.Load})
	txs, submit, taken, gathering := r.txs, r.submit, r.taken, r.gathering

	<-submit(Normal, 2)
	start := time.Now()
	<-submit(Normal, 1)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("alone, a lone write after a batch of two committed after %s, want at once", took)
	}
	select {
	case <-gathering:
		t.Fatal("the writer waited for more writes while no other node shares the database")
	default:
	}

	shared.Store(true)
	<-submit(Normal, 2)
	first := submit(Normal, 1)
	taken()
	second := submit(Normal, 1)
	<-first
	<-second
	if got := txs(); !slices.Equal(got, []int{2, 1, 2, 2}) {
		t.Fatalf("transactions %v, want [2 1 2 2]: shared, the lone write waits for the next", got)
	}
}

// TestLowGather: with LowGather alone, a batch of Low writes after a batch
// of several waits for more Low writes, any other write ends the wait and
// joins the batch, and API writes never wait.
func TestLowGather(t *testing.T) {
	t.Parallel()
	r := newGatherRig(t, Config[*write]{MaxBatch: 4, LowGather: time.Minute})
	txs, submit, taken, gathering := r.txs, r.submit, r.taken, r.gathering

	<-submit(Normal, 2) // a batch of two
	first := submit(Low, 1)
	taken()
	rest := []chan []error{submit(Low, 1), submit(Low, 1), submit(Low, 1)}
	for _, c := range append(rest, first) {
		<-c
	}
	if got := txs(); !slices.Equal(got, []int{2, 4}) {
		t.Fatalf("transactions %v, want [2 4]: the Low write waits for the three that came, until the batch is full", got)
	}

	low := submit(Low, 1)
	taken()
	start := time.Now()
	<-submit(Normal, 1)
	<-low
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("an API write committed %s after it came, want at once (LowGather is a minute)", took)
	}
	if got := txs(); !slices.Equal(got, []int{2, 4, 2}) {
		t.Fatalf("transactions %v, want [2 4 2]: the API write ends the wait and joins the batch", got)
	}

	<-submit(Normal, 2)
	start = time.Now()
	<-submit(Normal, 1)
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("an API write after a batch of two committed after %s, want at once (no Gather)", took)
	}
	if got := txs(); !slices.Equal(got, []int{2, 4, 2, 2, 1}) {
		t.Fatalf("transactions %v, want [2 4 2 2 1]: API writes do not wait for LowGather", got)
	}
	select {
	case <-gathering:
		t.Fatal("the writer waited before a batch of API writes")
	default:
	}
}

// TestRetryPolicyDo: a lost race runs again after the backoff, with its
// reason observed, up to Attempts; an error that is not a race is final;
// a context that ends during the backoff returns the last error at once.
func TestRetryPolicyDo(t *testing.T) {
	t.Parallel()
	classify := func(err error) Class {
		if errors.Is(err, errRace) {
			return Class{Kind: Retry, Reason: "deadlock"}
		}
		return Class{Kind: OneWrite}
	}
	var reasons []string
	observe := func(r string) { reasons = append(reasons, r) }
	calls := 0
	p := RetryPolicy{Attempts: 3, Backoff: func(int) time.Duration { return time.Millisecond }}
	err := p.Do(t.Context(), func() error { calls++; return errRace }, classify, observe)
	if !errors.Is(err, errRace) || calls != 3 || !slices.Equal(reasons, []string{"deadlock", "deadlock"}) {
		t.Fatalf("Do = %v after %d calls, reasons %v; want the race after 3 calls and 2 retries", err, calls, reasons)
	}
	calls = 0
	if err := p.Do(t.Context(), func() error { calls++; return errBroken }, classify, nil); !errors.Is(err, errBroken) || calls != 1 {
		t.Fatalf("Do of a final error = %v after %d calls; want it after 1", err, calls)
	}
	ctx, cancel := context.WithCancel(t.Context())
	slow := RetryPolicy{Attempts: 5, Backoff: func(int) time.Duration { return time.Hour }}
	calls = 0
	done := make(chan error, 1)
	go func() { done <- slow.Do(ctx, func() error { calls++; return errRace }, classify, nil) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, errRace) || calls != 1 {
			t.Fatalf("Do with its context ended = %v after %d calls; want the race after 1", err, calls)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Do waited out an hour's backoff after its context ended")
	}
}
