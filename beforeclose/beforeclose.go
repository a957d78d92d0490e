// Package beforeclose is the payment check before a close: hourglass asks
// the shop (or its payment provider's adapter) whether an order that is due
// may close, because a payment can succeed a second before the deadline
// while its callback arrives after it (and some providers, WeChat Pay's
// close-order API among them, require the query first).
//
// A Checker POSTs a JSON body to a URL, signed exactly like a webhook
// delivery (header Hourglass-Signature, see package webhook), with a
// timeout, and parses the answer, one of:
//
//	{"action":"close"}                              close now
//	{"action":"paid","payment_id":"…"}              do not close: it was paid
//	{"action":"extend","deadline":"<RFC 3339>"}     do not close: arm again then
//
// Anything else is a failure: a transport error, no answer within the
// timeout, a status other than 2xx, an answer over MaxAnswerBytes, a body
// that is not one of the three. The Checker also keeps the failure
// bookkeeping of the checks its caller retries: how many failed in a row
// for a key (an order id, a source row), the wait before the next attempt
// (RetryMin doubling, at most RetryMax), and since when checks have been
// failing (the before_close_failures alert reads it). A Gate (gate.go) is
// the one answer policy over a Checker, used by both close paths: the
// engine's for hourglass's own orders (Gate.Hold) and package source's for
// shops' rows (Gate.Check).
//
// The package imports the root, the timing core (Backoff) and package
// webhook for the signature, so that a check is signed by the one Sign a
// receiver already verifies.
package beforeclose

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
	"github.com/hourglass/hourglass/timing"
	"github.com/hourglass/hourglass/webhook"
)

// Defaults and limits.
const (
	// TimeoutDefault bounds one check: the request and its answer.
	TimeoutDefault = 2 * time.Second
	// MaxAnswerBytes is the largest answer read; a longer one is a failure.
	MaxAnswerBytes = 64 << 10
	// RetryMin is the wait after a key's first failure; it doubles with
	// each failure in a row, up to RetryMax.
	RetryMin = 100 * time.Millisecond
	RetryMax = 5 * time.Second
	// MaxTrackedDefault is how many failing keys are tracked at most (a
	// burst of orders against a receiver that is down): past it a new
	// failing key is not tracked (Failed answers 1 failure and RetryMax).
	MaxTrackedDefault = 100000
	// StaleAfter is how long a key may go without a failure and still
	// count as failing: a key no check failed for since (its order was
	// paid through the API, or the caller stopped asking) is forgotten.
	StaleAfter = time.Minute
	// MaxExtension is how far past its first deadline (before any
	// extension by a check) a check may extend an order or a row: a later
	// deadline is capped to it.
	MaxExtension = 7 * 24 * time.Hour
)

// Action is what an answer tells the caller to do.
type Action string

// The actions of an answer.
const (
	// ActionClose: close now.
	ActionClose Action = "close"
	// ActionPaid: do not close; the payment succeeded (Answer.PaymentID).
	ActionPaid Action = "paid"
	// ActionExtend: do not close; arm again for Answer.Deadline.
	ActionExtend Action = "extend"
)

// Answer labels of failed checks (Observer).
const (
	// AnswerError: no valid answer (transport, timeout, status, body).
	AnswerError = "error"
	// AnswerExtendInvalid: an extend whose deadline, capped at the latest
	// the caller allows, is not after now. Arming it again would fire at
	// once and ask again: it is a failed check, retried with backoff.
	AnswerExtendInvalid = "extend_invalid"
)

// ErrExtendNotAhead is the cause of an AnswerExtendInvalid check.
var ErrExtendNotAhead = errors.New("the extend answer's deadline is not after now")

// Answer is a parsed answer: its Action, the PaymentID of a paid (valid
// per hourglass.ValidatePaymentID) and the Deadline of an extend (in whole
// milliseconds, rounded up; Capped when Ask lowered it to its latest).
type Answer struct {
	Action    Action
	PaymentID string
	Deadline  time.Time
	Capped    bool
}

// Observer is told each check's outcome, for metrics: answer is an Action
// or AnswerError, took the time from the request to the parsed answer (or
// the failure). It must be safe for concurrent use.
type Observer interface {
	ObserveBeforeClose(answer string, took time.Duration)
}

// Config configures a Checker. The zero value of each field means its
// default.
type Config struct {
	// Secret signs every request (header Hourglass-Signature, as
	// webhook.Sign); empty sends no signature.
	Secret string
	// Timeout bounds one check (default TimeoutDefault), timed by Clock.
	Timeout time.Duration
	// Client sends the requests (default a client without its own timeout
	// that does not follow redirects and keeps 64 idle connections per
	// host).
	Client *http.Client
	// Clock signs, times the checks and the failures (default the system
	// clock). A TimerClock also times the timeout.
	Clock    hourglass.Clock
	Observer Observer
	Logger   *slog.Logger
	// MaxTracked bounds the failing keys tracked (default MaxTrackedDefault).
	MaxTracked int
}

// Validate reports a configuration error naming the field.
func (c Config) Validate() error {
	switch {
	case c.Timeout < 0 || c.Timeout > time.Minute:
		return fmt.Errorf("beforeclose: Timeout must be between 0 (default %s) and 1m, got %s", TimeoutDefault, c.Timeout)
	case c.MaxTracked < 0:
		return fmt.Errorf("beforeclose: MaxTracked must be >= 0, got %d", c.MaxTracked)
	}
	return nil
}

// ValidateURL checks a check URL: an absolute http or https URL with a
// host. The error is one line naming what is wrong.
func ValidateURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%q is not a URL", redact.URL(raw))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: the scheme must be http or https", redact.URL(raw))
	}
	if u.Host == "" {
		return fmt.Errorf("%q has no host", redact.URL(raw))
	}
	return nil
}

// Checker asks before closes and keeps the failure bookkeeping. One per
// node; it is safe for concurrent use.
type Checker struct {
	cfg   Config
	clock hourglass.TimerClock
	log   *slog.Logger

	mu      sync.Mutex
	failing map[string]*failure
	// extending holds the keys whose last answers were extends: each
	// next check waits a step that doubles (Extended).
	extending map[string]*extendRun
}

// extendRun is one key's run of extend answers.
type extendRun struct {
	next    time.Time // the key is not asked before
	backoff timing.Backoff
}

// failure is one key's run of failed checks.
type failure struct {
	count       int
	since, last time.Time
	backoff     timing.Backoff
}

// New returns a Checker. Errors: an invalid Config.
func New(cfg Config) (*Checker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	cfg.MaxTracked = cmp.Or(cfg.MaxTracked, MaxTrackedDefault)
	if cfg.Client == nil {
		// Checks run dozens at once against one host: keep that many
		// connections open (the default transport keeps 2 per host).
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		cfg.Client = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	c := &Checker{cfg: cfg, clock: hourglass.WithTimers(cfg.Clock), log: cmp.Or(cfg.Logger, slog.Default()), failing: map[string]*failure{}, extending: map[string]*extendRun{}}
	return c, nil
}

// errTimeout is the cause of a check that got no answer in time.
var errTimeout = errors.New("no answer within the timeout")

// Ask POSTs body (JSON) to url, signed, and parses the answer. An extend
// later than latest (zero: no bound) is capped to latest (Answer.Capped).
// Any failure is an error saying what went wrong (the status and an
// excerpt of the body, the transport error, no answer within the timeout,
// an answer that is not one of the three, an extend whose deadline,
// capped, is not after now: ErrExtendNotAhead); the answer is then the
// zero Answer. It does not touch the bookkeeping (Failed, Extended,
// Succeeded). Safe for concurrent use.
func (c *Checker) Ask(ctx context.Context, url string, body []byte, latest time.Time) (Answer, error) {
	start := c.clock.Now()
	a, err := c.ask(ctx, url, body)
	label := string(a.Action)
	if err != nil {
		label = AnswerError
	} else if a.Action == ActionExtend {
		if !latest.IsZero() && a.Deadline.After(latest) {
			a.Deadline, a.Capped = latest, true
		}
		if now := c.clock.Now(); !a.Deadline.After(now) {
			label = AnswerExtendInvalid
			err = fmt.Errorf("beforeclose: POST %s: %w (%s, now %s; capped: %t)", url, ErrExtendNotAhead,
				a.Deadline.UTC().Format(hourglass.TimeFormat), now.UTC().Format(hourglass.TimeFormat), a.Capped)
			a = Answer{}
		}
	}
	if c.cfg.Observer != nil {
		c.cfg.Observer.ObserveBeforeClose(label, c.clock.Now().Sub(start))
	}
	return a, err
}

func (c *Checker) ask(ctx context.Context, rawURL string, body []byte) (Answer, error) {
	// Messages name the URL without its user, password and query tokens.
	url := redact.URL(rawURL)
	// The timeout is the clock's, so a test's fake clock drives it.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := c.clock.AfterFunc(c.cfg.Timeout, func() { cancel(errTimeout) })
	defer timer.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return Answer{}, fmt.Errorf("beforeclose: %w", redact.Err(err, rawURL))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hourglass-before-close")
	if c.cfg.Secret != "" {
		req.Header.Set(webhook.SignatureHeader, webhook.Sign(c.cfg.Secret, c.clock.Now(), body))
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errTimeout) {
			return Answer{}, fmt.Errorf("beforeclose: POST %s: %w (%s)", url, errTimeout, c.cfg.Timeout)
		}
		return Answer{}, fmt.Errorf("beforeclose: POST %s: %w", url, redact.Err(err, rawURL))
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		if errors.Is(context.Cause(ctx), errTimeout) {
			err = fmt.Errorf("%w (%s)", errTimeout, c.cfg.Timeout)
		}
		return Answer{}, fmt.Errorf("beforeclose: POST %s: reading the answer: %w", url, err)
	}
	if len(raw) > MaxAnswerBytes {
		return Answer{}, fmt.Errorf("beforeclose: POST %s: the answer is over %d bytes", url, MaxAnswerBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Answer{}, fmt.Errorf("beforeclose: POST %s: status %d: %s", url, resp.StatusCode, excerpt(raw))
	}
	a, err := ParseAnswer(raw)
	if err != nil {
		return Answer{}, fmt.Errorf("beforeclose: POST %s: %w", url, err)
	}
	return a, nil
}

// answerJSON is the wire form of an answer.
type answerJSON struct {
	Action    *string `json:"action"`
	PaymentID *string `json:"payment_id"`
	Deadline  *string `json:"deadline"`
}

// ParseAnswer parses an answer's body: one JSON object whose action is
// close, paid (with a valid payment_id) or extend (with an RFC 3339
// deadline); other fields are ignored. Errors say what is wrong.
func ParseAnswer(raw []byte) (Answer, error) {
	var w answerJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&w); err != nil {
		return Answer{}, fmt.Errorf("the answer %s is not a JSON object: %v", excerpt(raw), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Answer{}, fmt.Errorf("the answer %s has data after its JSON object", excerpt(raw))
	}
	if w.Action == nil {
		return Answer{}, fmt.Errorf("the answer %s has no action (want close, paid or extend)", excerpt(raw))
	}
	switch a := Action(*w.Action); a {
	case ActionClose:
		return Answer{Action: a}, nil
	case ActionPaid:
		if w.PaymentID == nil {
			return Answer{}, errors.New("a paid answer needs a payment_id")
		}
		if err := hourglass.ValidatePaymentID(*w.PaymentID); err != nil {
			return Answer{}, fmt.Errorf("a paid answer's %s", hourglass.ErrorMessage(err))
		}
		return Answer{Action: a, PaymentID: *w.PaymentID}, nil
	case ActionExtend:
		if w.Deadline == nil {
			return Answer{}, errors.New("an extend answer needs a deadline")
		}
		t, err := time.Parse(time.RFC3339Nano, *w.Deadline)
		if err != nil {
			return Answer{}, fmt.Errorf("an extend answer's deadline %q is not an RFC 3339 time", *w.Deadline)
		}
		ms := hourglass.UnixMilli(t)
		if t.After(hourglass.FromUnixMilli(ms)) {
			ms++ // never earlier than asked
		}
		return Answer{Action: a, Deadline: hourglass.FromUnixMilli(ms)}, nil
	default:
		return Answer{}, fmt.Errorf("the answer's action %q is not close, paid or extend", *w.Action)
	}
}

// excerpt returns at most 200 bytes of an answer, for an error message.
func excerpt(raw []byte) string {
	const n = 200
	if len(raw) > n {
		return fmt.Sprintf("%q…", raw[:n])
	}
	return fmt.Sprintf("%q", raw)
}

// Failed records a failed check of key and returns how many failed in a
// row and the wait before the next attempt: RetryMin doubling, at most
// RetryMax, or the next step of key's extend run where that is longer. A
// new key beyond MaxTracked is not tracked: (1, RetryMax). Safe for
// concurrent use.
func (c *Checker) Failed(key string) (failures int, retryIn time.Duration) {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.failing[key]
	if f != nil && now.Sub(f.last) > StaleAfter {
		f = nil // a run that ended long ago: this is a new one
	}
	if f == nil {
		if len(c.failing) >= c.cfg.MaxTracked {
			c.prune(now)
		}
		if len(c.failing) >= c.cfg.MaxTracked {
			return 1, RetryMax
		}
		f = &failure{since: now, backoff: timing.Backoff{Min: RetryMin, Max: RetryMax}}
		c.failing[key] = f
	}
	f.count++
	f.last = now
	retryIn = f.backoff.Next()
	// A provider whose extends alternate with failed answers (an extend
	// to a moment that has passed by the time it is read) is still asked
	// at most once per step of its extend run: a failure advances that run
	// too, instead of starting its own backoff at RetryMin each time.
	if r := c.extending[key]; r != nil && now.Sub(r.next) <= StaleAfter {
		retryIn = max(retryIn, r.backoff.Next())
		r.next = now.Add(retryIn)
	}
	return f.count, retryIn
}

// Succeeded forgets key's failures and extends: its check got a close or
// paid answer, or the caller no longer asks (the order was paid
// meanwhile). Safe for concurrent use.
func (c *Checker) Succeeded(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failing, key)
	delete(c.extending, key)
}

// Extended records an extend answer for key (forgetting its failures) and
// returns the least wait before key is asked again: RetryMin after the
// first extend in a row, doubling up to RetryMax, so that a provider that
// keeps extending by a moment is asked at most once per step. Wait tells
// the rest of it later. A new key beyond MaxTracked is not tracked:
// RetryMax. Safe for concurrent use.
func (c *Checker) Extended(key string) time.Duration {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.failing, key)
	r := c.extending[key]
	if r != nil && now.Sub(r.next) > StaleAfter {
		r = nil // a run that ended long ago
	}
	if r == nil {
		if len(c.extending) >= c.cfg.MaxTracked {
			for k, e := range c.extending {
				if now.Sub(e.next) > StaleAfter {
					delete(c.extending, k)
				}
			}
		}
		if len(c.extending) >= c.cfg.MaxTracked {
			return RetryMax
		}
		r = &extendRun{backoff: timing.Backoff{Min: RetryMin, Max: RetryMax}}
		c.extending[key] = r
	}
	wait := r.backoff.Next()
	r.next = now.Add(wait)
	return wait
}

// Wait returns how long key must wait before it is asked again after its
// last extend answer (Extended); zero when it may be asked now. Safe for
// concurrent use.
func (c *Checker) Wait(key string) time.Duration {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.extending[key]; r != nil && r.next.After(now) {
		return r.next.Sub(now)
	}
	return 0
}

// FailingSince returns when the oldest ongoing run of failures began
// (ok false: no key failed within StaleAfter). Safe for concurrent use;
// it costs one pass over the failing keys.
func (c *Checker) FailingSince() (since time.Time, ok bool) {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.prune(now)
	for _, f := range c.failing {
		if !ok || f.since.Before(since) {
			since, ok = f.since, true
		}
	}
	return since, ok
}

// Failing returns how many keys are failing now. Safe for concurrent use.
func (c *Checker) Failing() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.failing)
}

// prune drops the keys no check failed for within StaleAfter. c.mu is held.
func (c *Checker) prune(now time.Time) {
	for k, f := range c.failing {
		if now.Sub(f.last) > StaleAfter {
			delete(c.failing, k)
		}
	}
}
