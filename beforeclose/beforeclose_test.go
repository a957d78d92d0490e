package beforeclose_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/webhook"
)

const secret = "a-check-secret-0123456789"

// observed records what the Checker tells its Observer.
type observed struct {
	mu      sync.Mutex
	answers []string
}

func (o *observed) ObserveBeforeClose(answer string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.answers = append(o.answers, answer)
}

func (o *observed) all() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.answers)
}

// setup returns a Checker on a fake clock and a receiver answering with
// answer (status 200 unless status is set), checking each request's
// signature and body.
func setup(t *testing.T, status int, answer string) (*beforeclose.Checker, *hourglasstest.Clock, *observed, string) {
	t.Helper()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	want := []byte(`{"order":{"id":7}}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || string(body) != string(want) {
			t.Errorf("request %s %q %s; want POST application/json %s", r.Method, r.Header.Get("Content-Type"), body, want)
		}
		if err := webhook.Verify(r.Header.Get(webhook.SignatureHeader), secret, body, clock.Now(), time.Minute); err != nil {
			t.Errorf("signature %q: %v", r.Header.Get(webhook.SignatureHeader), err)
		}
		if status != 0 {
			w.WriteHeader(status)
		}
		io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	obs := &observed{}
	c, err := beforeclose.New(beforeclose.Config{Secret: secret, Clock: clock, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	return c, clock, obs, srv.URL
}

func TestAskAnswers(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 21, 10, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		name, body string
		want       beforeclose.Answer
	}{
		{"close", `{"action":"close"}`, beforeclose.Answer{Action: beforeclose.ActionClose}},
		{"paid", `{"action":"paid","payment_id":"wx-42"}`, beforeclose.Answer{Action: beforeclose.ActionPaid, PaymentID: "wx-42"}},
		{"extend", `{"action":"extend","deadline":"2026-11-21T10:30:00.000Z"}`, beforeclose.Answer{Action: beforeclose.ActionExtend, Deadline: at}},
		{"extend rounds up", `{"action":"extend","deadline":"2026-11-21T10:29:59.9991Z"}`, beforeclose.Answer{Action: beforeclose.ActionExtend, Deadline: at}},
		{"other fields ignored", ` {"action":"close","trace":"x"} `, beforeclose.Answer{Action: beforeclose.ActionClose}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, obs, url := setup(t, 0, tt.body)
			got, err := c.Ask(context.Background(), url, []byte(`{"order":{"id":7}}`), time.Time{})
			if err != nil || got != tt.want {
				t.Fatalf("Ask = %+v, %v; want %+v", got, err, tt.want)
			}
			if a := obs.all(); !slices.Equal(a, []string{string(tt.want.Action)}) {
				t.Fatalf("observed %v, want [%s]", a, tt.want.Action)
			}
		})
	}
}

func TestAskFailures(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		says   string
	}{
		{"server error", 500, `{"action":"close"}`, "status 500"},
		{"redirect", 302, ``, "status 302"},
		{"not JSON", 0, `close`, "not a JSON object"},
		{"empty", 0, ``, "not a JSON object"},
		{"no action", 0, `{}`, "no action"},
		{"unknown action", 0, `{"action":"wait"}`, `"wait"`},
		{"paid without payment_id", 0, `{"action":"paid"}`, "payment_id"},
		{"paid with an empty payment_id", 0, `{"action":"paid","payment_id":""}`, "payment_id"},
		{"extend without deadline", 0, `{"action":"extend"}`, "deadline"},
		{"extend with a bad deadline", 0, `{"action":"extend","deadline":"soon"}`, "deadline"},
		{"trailing data", 0, `{"action":"close"} {"action":"close"}`, "after its JSON"},
		{"action not a string", 0, `{"action":1}`, "not a JSON object"},
		{"over 64 KiB", 0, `{"action":"close","pad":"` + strings.Repeat("x", beforeclose.MaxAnswerBytes) + `"}`, "over 65536 bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, obs, url := setup(t, tt.status, tt.body)
			got, err := c.Ask(context.Background(), url, []byte(`{"order":{"id":7}}`), time.Time{})
			if err == nil || !strings.Contains(err.Error(), tt.says) || got != (beforeclose.Answer{}) {
				t.Fatalf("Ask = %+v, %v; want an error saying %q", got, err, tt.says)
			}
			if a := obs.all(); !slices.Equal(a, []string{beforeclose.AnswerError}) {
				t.Fatalf("observed %v, want [error]", a)
			}
		})
	}
}

// TestAskTimeout: a receiver that does not answer fails the check once the
// clock passes the timeout, and no sooner.
func TestAskTimeout(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	c, err := beforeclose.New(beforeclose.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Ask(context.Background(), srv.URL, []byte(`{}`), time.Time{})
		done <- err
	}()
	<-arrived
	clock.Advance(beforeclose.TimeoutDefault - time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Ask returned %v before the timeout", err)
	default:
	}
	clock.Advance(time.Millisecond)
	if err := <-done; err == nil || !strings.Contains(err.Error(), "no answer within the timeout (2s)") {
		t.Fatalf("Ask = %v, want no answer within the timeout (2s)", err)
	}
}

func TestFailureBookkeeping(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	c, err := beforeclose.New(beforeclose.Config{Clock: clock, MaxTracked: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.FailingSince(); ok {
		t.Fatal("FailingSince with no failure: ok")
	}
	var waits []time.Duration
	for i := range 8 {
		n, wait := c.Failed("7")
		if n != i+1 {
			t.Fatalf("failure %d counted %d", i+1, n)
		}
		waits = append(waits, wait)
		clock.Advance(time.Second)
	}
	ms := time.Millisecond
	if want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}; !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
	c.Failed("8")
	if since, ok := c.FailingSince(); !ok || !since.Equal(hourglasstest.Epoch) {
		t.Fatalf("FailingSince = %v, %v; want the first failure of 7", since, ok)
	}
	c.Succeeded("7")
	if since, ok := c.FailingSince(); !ok || !since.Equal(hourglasstest.Epoch.Add(8*time.Second)) {
		t.Fatalf("FailingSince after 7 succeeded = %v, %v; want 8's first failure", since, ok)
	}
	if n, wait := c.Failed("7"); n != 1 || wait != beforeclose.RetryMin {
		t.Fatalf("7 after its success: %d failures, wait %v; want a new run", n, wait)
	}
	// Bounded: a fourth key is not tracked.
	c.Failed("9")
	if n, wait := c.Failed("10"); n != 1 || wait != beforeclose.RetryMax || c.Failing() != 3 {
		t.Fatalf("a key past MaxTracked: %d failures, wait %v, %d tracked; want 1, RetryMax, 3", n, wait, c.Failing())
	}
	// Keys no check failed for within StaleAfter are forgotten.
	clock.Advance(beforeclose.StaleAfter + time.Millisecond)
	if since, ok := c.FailingSince(); ok || c.Failing() != 0 {
		t.Fatalf("FailingSince after StaleAfter = %v, %v (%d tracked); want none", since, ok, c.Failing())
	}
}

func TestValidateURL(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"http://127.0.0.1:8080/check", "https://pay.internal/hourglass/check"} {
		if err := beforeclose.ValidateURL(ok); err != nil {
			t.Errorf("ValidateURL(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"ftp://x/", "pay.internal/check", "http:///nohost", "://"} {
		if err := beforeclose.ValidateURL(bad); err == nil {
			t.Errorf("ValidateURL(%q) = nil", bad)
		}
	}
	if _, err := beforeclose.New(beforeclose.Config{Timeout: -1}); err == nil {
		t.Error("New with a negative Timeout: nil error")
	}
}

var _ hourglass.Clock = (*hourglasstest.Clock)(nil)

// TestAskExtendBounds: an extend to a deadline not after now is a failed
// check (extend_invalid), so that arming it again does not fire at once
// and ask again; one past latest is capped there; one capped to a latest
// that has passed is a failure too (the cap is reached).
func TestAskExtendBounds(t *testing.T) {
	t.Parallel()
	now := hourglasstest.Epoch
	for _, tt := range []struct {
		name     string
		deadline time.Time
		latest   time.Time
		want     beforeclose.Answer
		label    string
	}{
		{"ahead", now.Add(time.Minute), time.Time{}, beforeclose.Answer{Action: beforeclose.ActionExtend, Deadline: now.Add(time.Minute)}, "extend"},
		{"in the past", now.Add(-time.Second), time.Time{}, beforeclose.Answer{}, beforeclose.AnswerExtendInvalid},
		{"now", now, time.Time{}, beforeclose.Answer{}, beforeclose.AnswerExtendInvalid},
		{"capped", now.Add(30 * 24 * time.Hour), now.Add(time.Hour), beforeclose.Answer{Action: beforeclose.ActionExtend, Deadline: now.Add(time.Hour), Capped: true}, "extend"},
		{"cap reached", now.Add(time.Hour), now.Add(-time.Millisecond), beforeclose.Answer{}, beforeclose.AnswerExtendInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, obs, url := setup(t, 0, `{"action":"extend","deadline":"`+tt.deadline.Format(hourglass.TimeFormat)+`"}`)
			got, err := c.Ask(context.Background(), url, []byte(`{"order":{"id":7}}`), tt.latest)
			if got != tt.want || (err != nil) != (tt.label == beforeclose.AnswerExtendInvalid) {
				t.Fatalf("Ask = %+v, %v; want %+v", got, err, tt.want)
			}
			if err != nil && !errors.Is(err, beforeclose.ErrExtendNotAhead) {
				t.Errorf("err %v is not ErrExtendNotAhead", err)
			}
			if a := obs.all(); !slices.Equal(a, []string{tt.label}) {
				t.Fatalf("observed %v, want [%s]", a, tt.label)
			}
		})
	}
}

// TestExtendedSteps: a run of extend answers for a key spaces its checks
// RetryMin doubling to RetryMax (Wait says how much is left); a close or
// paid answer (Succeeded) ends the run; Extended forgets the key's
// failures.
func TestExtendedSteps(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	c, err := beforeclose.New(beforeclose.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	c.Failed("k")
	var got []time.Duration
	for range 8 {
		got = append(got, c.Extended("k"))
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 5000, 5000}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(got, want) {
		t.Errorf("Extended steps %v, want %v", got, want)
	}
	if c.Failing() != 0 {
		t.Errorf("Failing = %d after an extend answer; want 0", c.Failing())
	}
	clock.Advance(time.Second)
	if w := c.Wait("k"); w != 4*time.Second {
		t.Errorf("Wait = %s, want 4s", w)
	}
	if w := c.Wait("other"); w != 0 {
		t.Errorf("Wait of a key never extended = %s", w)
	}
	c.Succeeded("k")
	if w := c.Wait("k"); w != 0 {
		t.Errorf("Wait after Succeeded = %s", w)
	}
	if w := c.Extended("k"); w != beforeclose.RetryMin {
		t.Errorf("Extended after Succeeded = %s, want a new run", w)
	}
}

// TestExtendsAndFailuresShareSteps: a provider whose extends to a moment
// alternate with failed answers (the moment passed before the answer was
// read: TestBeforeCloseExtendNotAhead under -race asked 12 times in 3 s)
// is asked at most once per step: each answer, valid or not, doubles the
// wait, instead of a failure restarting its own backoff at RetryMin.
func TestExtendsAndFailuresShareSteps(t *testing.T) {
	t.Parallel()
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	c, err := beforeclose.New(beforeclose.Config{Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	var got []time.Duration
	for i := range 6 {
		if i%2 == 0 {
			got = append(got, c.Extended("k"))
		} else {
			_, in := c.Failed("k")
			got = append(got, in)
		}
		clock.Advance(got[len(got)-1])
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200}
	for i := range want {
		want[i] *= time.Millisecond
	}
	if !slices.Equal(got, want) {
		t.Errorf("waits of alternating extends and failures %v, want %v", got, want)
	}
}
