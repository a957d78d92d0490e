package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/store/sqlite"
	"github.com/hourglass/hourglass/webhook"
)

func TestSanitizeText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		limit    int
		want     string
	}{
		{"plain", "HTTP 500: bad request", 0, "HTTP 500: bad request"},
		{"utf16 without bom", "E\x00r\x00r\x00", 0, "Err"},
		{"utf16 bom", "\xff\xfeE\x00r\x00r\x00", 0, "\uFFFDErr"},
		{"a run of invalid bytes is one replacement", "a\xff\xfe\xfdb\xc0c", 0, "a\uFFFDb\uFFFDc"},
		{"newline and tab kept, other controls dropped", "a\nb\tc\r\x1b[31md\x7fe\u0085f\u009bg", 0, "a\nb\tc[31mdefg"},
		{"multibyte kept", "héllo 日本 😀", 0, "héllo 日本 😀"},
		{"cut at a rune boundary", "日本語", 7, "日本"},
		{"cut exactly", "abcdef", 3, "abc"},
		{"incomplete rune at the end dropped", "ab\xe6\x97", 0, "ab"},
		{"incomplete rune inside replaced", "a\xe6b", 0, "a\uFFFDb"},
		{"surrogate encoded in UTF-8 is invalid", "a\xed\xa0\x80b", 0, "a\uFFFDb"},
		{"only controls", "\x00\x01\x02", 0, ""},
		{"empty", "", 5, ""},
		// The work is bounded by the limit: a megabyte of NULs is not read.
		{"long run of dropped bytes", "x" + strings.Repeat("\x00", 1<<20) + "y", 10, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := webhook.SanitizeText(tt.in, tt.limit); got != tt.want {
				t.Errorf("SanitizeText(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
			}
		})
	}
}

// FuzzSanitizeText: whatever the bytes, the text is valid UTF-8, holds no
// control character but \n and \t, fits the limit, and is its own
// sanitisation.
func FuzzSanitizeText(f *testing.F) {
	f.Add("\xff\xfeE\x00r\x00r\x00", 8)
	f.Add("a\r\n\x1b\u0085日本", 4)
	f.Fuzz(func(t *testing.T, in string, limit int) {
		limit = limit % 2048
		got := webhook.SanitizeText(in, limit)
		if !utf8.ValidString(got) {
			t.Fatalf("%q: invalid UTF-8", got)
		}
		if limit > 0 && len(got) > limit {
			t.Fatalf("%q: %d bytes, limit %d", got, len(got), limit)
		}
		for _, r := range got {
			if unicode.IsControl(r) && r != '\n' && r != '\t' {
				t.Fatalf("%q holds %U", got, r)
			}
		}
		if again := webhook.SanitizeText(got, limit); again != got {
			t.Fatalf("not idempotent: %q then %q", got, again)
		}
	})
}

// openStore opens a fresh store of the kind named, closed at cleanup; a
// server-backed kind is skipped when its server is absent (fails under
// CI=true).
func openStore(t *testing.T, kind string) hourglass.Database {
	t.Helper()
	ctx := context.Background()
	var (
		db  hourglass.Database
		err error
	)
	switch kind {
	case "sqlite":
		db, err = sqlite.Open(sqlite.Config{Dir: t.TempDir(), Logger: quietLogger()})
	case "postgres":
		db, err = postgres.Open(ctx, postgres.Config{URL: pgtest.NewDatabase(t), Logger: quietLogger()})
	case "mysql":
		db, err = mysql.Open(ctx, mysql.Config{URL: mytest.NewDatabase(t), Logger: quietLogger()})
	default:
		t.Fatalf("no store %q", kind)
	}
	if err != nil {
		t.Fatalf("open %s: %v", kind, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// failingReceiver answers every request with status and body, and records
// when each came and the attempt number it carried.
type failingReceiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	at      []time.Time
	attempt []string
}

func newFailingReceiver(t *testing.T, status int, body string) *failingReceiver {
	t.Helper()
	rc := &failingReceiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.mu.Lock()
		rc.at = append(rc.at, time.Now())
		rc.attempt = append(rc.attempt, r.Header.Get(webhook.AttemptHeader))
		rc.mu.Unlock()
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *failingReceiver) requests() (at []time.Time, attempt []string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]time.Time(nil), rc.at...), append([]string(nil), rc.attempt...)
}

// checkSchedule fails t unless the receiver got exactly one request per
// attempt of retry (len(retry)+1), numbered from 1, each retry no sooner
// than its delay after the previous attempt.
func (rc *failingReceiver) checkSchedule(t *testing.T, retry []time.Duration) {
	t.Helper()
	at, attempt := rc.requests()
	if len(at) != len(retry)+1 {
		t.Fatalf("%d requests (attempts %v), want %d: one per attempt of the schedule", len(at), attempt, len(retry)+1)
	}
	for i := range at {
		if attempt[i] != strconv.Itoa(i+1) {
			t.Errorf("request %d carried attempt %q, want %d", i+1, attempt[i], i+1)
		}
		// Attempt times are whole milliseconds of the store's clock (a
		// server's, on PostgreSQL and MySQL): the receiver's clock may see
		// one up to a millisecond short of the schedule.
		if i > 0 && at[i].Sub(at[i-1]) < retry[i-1]-time.Millisecond {
			t.Errorf("attempt %d came %v after the previous, before the %v of the schedule", i+1, at[i].Sub(at[i-1]), retry[i-1])
		}
	}
}

func (f *fixture) subscribeURL(t *testing.T, url string) {
	t.Helper()
	if _, err := f.svc.CreateWebhook(f.ctx, hourglass.WebhookParams{URL: url, Events: []hourglass.EventType{hourglass.EventOrderCreated}, Secret: secret}); err != nil {
		t.Fatal(err)
	}
}

// deadLetter waits for the one dead letter, failing after 20 s.
func (f *fixture) deadLetter(t *testing.T) hourglass.DeadLetter {
	t.Helper()
	waitCounts(t, f, 0, 1)
	dls, err := f.svc.DeadLetters(f.ctx, hourglass.DeadLetterFilter{Limit: 10})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	return dls[0]
}

// TestReceiverBytesStored: a receiver answering 500 with UTF-16 error text
// (NULs, and a byte order mark that is not UTF-8) gets one attempt per
// entry of the schedule, and the delivery is a dead letter whose error is
// the text, readable. On PostgreSQL, which refuses NUL in text, the
// attempt was never recorded and the delivery was sent every StoreRetry
// for ever.
func TestReceiverBytesStored(t *testing.T) {
	t.Parallel()
	retry := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}
	for _, kind := range []string{"sqlite", "postgres", "mysql"} {
		for _, body := range []struct{ name, bytes string }{
			{"utf16le with bom", "\xff\xfeE\x00r\x00r\x00"},
			{"utf16be with bom", "\xfe\xff\x00E\x00r\x00r"},
			{"utf16le without bom", "E\x00r\x00r\x00"},
		} {
			t.Run(kind+"/"+body.name, func(t *testing.T) {
				t.Parallel()
				f := setupOn(t, &fixture{ctx: context.Background()}, openStore(t, kind), webhook.Config{Retry: retry, StoreRetry: 10 * time.Millisecond})
				rc := newFailingReceiver(t, http.StatusInternalServerError, body.bytes)
				f.subscribeURL(t, rc.srv.URL)
				f.order(t)
				dl := f.deadLetter(t)
				if dl.LastError != "HTTP 500: Err" || dl.Attempts != len(retry)+1 {
					t.Errorf("dead letter: %d attempts, error %q; want %d, %q", dl.Attempts, dl.LastError, len(retry)+1, "HTTP 500: Err")
				}
				rc.checkSchedule(t, retry)
			})
		}
	}
}

// refusingStore is a store whose RecordAttempt fails whenever refuse says
// so, without writing.
type refusingStore struct {
	webhook.Store
	refuse  func(hourglass.AttemptResult) bool
	refused atomic.Int64
}

func (s *refusingStore) RecordAttempt(ctx context.Context, r hourglass.AttemptResult) (hourglass.AttemptRecord, error) {
	if s.refuse(r) {
		s.refused.Add(1)
		return hourglass.AttemptRecord{}, errors.New("refusingStore: record refused")
	}
	return s.Store.RecordAttempt(ctx, r)
}

// TestUnrecordedAttemptsCount: attempts the store refuses to record still
// count against the schedule: the receiver gets one request per entry of
// the schedule, at its times (not one every StoreRetry), and the delivery
// ends as a dead letter, with a minimal error when the store refuses the
// full one; a store refusing everything gets the dead letter once it
// accepts writes again, without the event being sent again.
func TestUnrecordedAttemptsCount(t *testing.T) {
	t.Parallel()
	retry := []time.Duration{60 * time.Millisecond, 120 * time.Millisecond}
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind+"/refuses non-ASCII text", func(t *testing.T) {
			t.Parallel()
			rs := &refusingStore{refuse: func(r hourglass.AttemptResult) bool {
				for _, c := range []byte(r.Error) {
					if c >= 0x80 {
						return true
					}
				}
				return false
			}}
			f := &fixture{ctx: context.Background(), wrap: func(s webhook.Store) webhook.Store { rs.Store = s; return rs }}
			f = setupOn(t, f, openStore(t, kind), webhook.Config{Retry: retry, StoreRetry: 5 * time.Millisecond})
			rc := newFailingReceiver(t, http.StatusBadGateway, "Fehler: ungültig")
			f.subscribeURL(t, rc.srv.URL)
			f.order(t)
			dl := f.deadLetter(t)
			rc.checkSchedule(t, retry)
			want := "HTTP 502: Fehler: ungltig (attempt 3; 2 before it could not be recorded) (the store refused the full error text)"
			if dl.LastError != want || dl.Attempts != 1 {
				t.Errorf("dead letter: %d attempts, error %q; want 1 (the row's count), %q", dl.Attempts, dl.LastError, want)
			}
		})
		t.Run(kind+"/refuses everything, then heals", func(t *testing.T) {
			t.Parallel()
			var healed atomic.Bool
			rs := &refusingStore{refuse: func(hourglass.AttemptResult) bool { return !healed.Load() }}
			f := &fixture{ctx: context.Background(), wrap: func(s webhook.Store) webhook.Store { rs.Store = s; return rs }}
			f = setupOn(t, f, openStore(t, kind), webhook.Config{Retry: retry, StoreRetry: 5 * time.Millisecond})
			rc := newFailingReceiver(t, http.StatusServiceUnavailable, "down")
			f.subscribeURL(t, rc.srv.URL)
			f.order(t)
			// Each attempt is refused once, the last (dead) twice, with its
			// full and its minimal error; then its record is tried again.
			testenv.Eventually(t, 20*time.Second, fmt.Sprintf("%d records refused", len(retry)+1+3), func() bool { return rs.refused.Load() >= int64(len(retry)+1)+3 })

			rc.checkSchedule(t, retry)
			healed.Store(true)
			dl := f.deadLetter(t)
			rc.checkSchedule(t, retry) // recorded, not sent again
			if dl.LastError != "HTTP 503: down (attempt 3; 2 before it could not be recorded)" {
				t.Errorf("dead letter error %q", dl.LastError)
			}
			// The observer is told just after the commit the dead letter's
			// read saw (the record waits for it off the worker).
			if got, ok := f.obs.await(5*time.Second, func(got map[string]int) bool {
				return got[webhook.OutcomeUnrecorded] == len(retry)+1 && got[webhook.OutcomeDead] == 1 && got[webhook.OutcomeRetry] == 0
			}); !ok {
				t.Errorf("outcomes %v", got)
			}
		})
	}
}

// unreadableStore is a store whose PendingDeliveries fails while fail
// says so, without reading.
type unreadableStore struct {
	webhook.Store
	fail  func() bool
	reads atomic.Int64
}

func (s *unreadableStore) PendingDeliveries(ctx context.Context, ids []int64) ([]hourglass.PendingDelivery, error) {
	s.reads.Add(1)
	if s.fail() {
		return nil, errors.New("unreadableStore: the database is down")
	}
	return s.Store.PendingDeliveries(ctx, ids)
}

// TestReadFailuresRetried: while the store cannot read deliveries (the
// batched reads the workers share), nothing is sent and nothing is lost:
// once it reads again, each event is delivered, once.
func TestReadFailuresRetried(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	us := &unreadableStore{fail: down.Load}
	f := &fixture{ctx: context.Background(), dir: t.TempDir(), wrap: func(s webhook.Store) webhook.Store { us.Store = s; return us }}
	f = setupOn(t, f, openStore(t, "sqlite"), webhook.Config{StoreRetry: 5 * time.Millisecond})
	rc := newReceiver(t)
	f.subscribe(t, rc, hourglass.EventOrderCreated)
	var evs []string
	for range 3 {
		evs = append(evs, f.eventIDs(t, f.order(t).ID)[0])
	}
	testenv.Eventually(t, 10*time.Second, "reads failing a while", func() bool { return us.reads.Load() >= 10 })
	if got := rc.all(); len(got) != 0 {
		t.Fatalf("%d requests sent while no delivery could be read", len(got))
	}
	down.Store(false)
	rc.waitFor("every event", func() bool { return len(rc.delivered()) == len(evs) })
	waitCounts(t, f, 0, 0)
	if got := rc.delivered(); len(got) != len(evs) || len(rc.all()) != len(evs) {
		t.Errorf("delivered %v in %d requests; want each of %v once", got, len(rc.all()), evs)
	}
}
