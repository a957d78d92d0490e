package alert

import (
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// RecorderSpan is how much history a Recorder keeps: the longest window a
// rule or the dashboard can read.
const RecorderSpan = 5 * time.Minute

// LatenessBounds are the upper bounds, in seconds, of the close-lateness
// histogram buckets (a last bucket, +Inf, holds the rest). They equal the
// buckets of the hourglass_close_lateness_seconds metric, so the built-in
// p99 and the Prometheus rule's histogram_quantile agree; 3 s is a bound so
// that the default threshold is decided exactly, not interpolated.
var LatenessBounds = [...]float64{.0005, .001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 3, 5, 10, 30, 60, 300}

// second is the activity of one wall-clock second.
type second struct {
	unix     int64 // the second it holds; a slot with another second is stale
	closed   int64
	stale    int64
	failed   int64
	created  int64
	lateness [len(LatenessBounds) + 1]int64
	// Clients' timers fired, and their fire lateness (fired_at − fire_at).
	fired        int64
	fireLateness [len(LatenessBounds) + 1]int64
	// Webhook deliveries' first attempts, by their lag from the event's
	// commit.
	deliveryLag [len(LatenessBounds) + 1]int64
	// Timer requests applied and rejected (package requests), and their
	// lag from requested_at to the commit that applied them.
	requestsApplied, requestsRejected int64
	requestLag                        [len(LatenessBounds) + 1]int64
	// Order reminders sent and skipped, and the sent ones' lateness
	// (sent_at − remind_at).
	reminded, remindSkipped int64
	remindLateness          [len(LatenessBounds) + 1]int64
}

// Recorder keeps the last RecorderSpan of close-path activity in one-second
// buckets: closes and their lateness, failed and no-op closes, creates, and
// clients' timers fired and their lateness.
// Memory is fixed (RecorderSpan/1s buckets); recording is O(1).
//
// It implements engine.Observer (Closed, Stale, CloseFailed, Swept,
// SchedulerFailed), engine.TimerObserver (Fired), webhook.LagObserver
// (WebhookDeliveryLag) and the API's request observer (ObserveRequest), so it is
// fed by the same calls as the Prometheus metrics. It is safe for concurrent
// use.
type Recorder struct {
	clock hourglass.Clock
	mu    sync.Mutex
	ring  [int(RecorderSpan / time.Second)]second
}

// NewRecorder returns an empty recorder that reads the time from clock (the
// system clock when nil).
func NewRecorder(clock hourglass.Clock) *Recorder {
	if clock == nil {
		clock = hourglass.SystemClock{}
	}
	return &Recorder{clock: clock}
}

// slot returns the bucket of the current second, emptied if it held an older
// second. r.mu must be held.
func (r *Recorder) slot() *second {
	unix := r.clock.Now().Unix()
	s := &r.ring[mod(unix, int64(len(r.ring)))]
	if s.unix != unix {
		*s = second{unix: unix}
	}
	return s
}

func mod(a, n int64) int64 { return ((a % n) + n) % n }

// Closed implements engine.Observer: one order closed, its lateness being
// closed_at - deadline.
func (r *Recorder) Closed(c hourglass.ClosedOrder, _ bool) {
	i := latenessBucket(c.ClosedAt.Sub(c.Deadline).Seconds())
	r.mu.Lock()
	s := r.slot()
	s.closed++
	s.lateness[i]++
	r.mu.Unlock()
}

// Fired implements engine.TimerObserver: one client timer fired, its
// lateness being fired_at - fire_at.
func (r *Recorder) Fired(t hourglass.FiredTimer, _ bool) {
	i := latenessBucket(t.FiredAt.Sub(t.FireAt).Seconds())
	r.mu.Lock()
	s := r.slot()
	s.fired++
	s.fireLateness[i]++
	r.mu.Unlock()
}

// Stale implements engine.Observer: n close attempts that were no-ops.
func (r *Recorder) Stale(n int) {
	r.mu.Lock()
	r.slot().stale += int64(n)
	r.mu.Unlock()
}

// CloseFailed implements engine.Observer: a close of n orders failed, so
// their stock was not released (yet).
func (r *Recorder) CloseFailed(n int, _ error) {
	r.mu.Lock()
	r.slot().failed += int64(n)
	r.mu.Unlock()
}

// Swept implements engine.Observer; the recorder does not use it.
func (r *Recorder) Swept(int) {}

// SchedulerFailed implements engine.Observer; the recorder does not use it.
func (r *Recorder) SchedulerFailed(error) {}

// CreateRoute is the API route whose 201 answers the recorder counts as
// created orders.
const CreateRoute = "/v1/orders"

// ObserveRequest implements the API's request observer: a 201 on POST
// /v1/orders is a created order (an idempotent repeat answers 200 and is not
// counted).
func (r *Recorder) ObserveRequest(route, method string, code int, _ time.Duration) {
	if route != CreateRoute || method != http.MethodPost || code != http.StatusCreated {
		return
	}
	r.mu.Lock()
	r.slot().created++
	r.mu.Unlock()
}

// latenessBucket returns the index of the bucket of a lateness in seconds.
func latenessBucket(sec float64) int {
	for i, b := range LatenessBounds {
		if sec <= b {
			return i
		}
	}
	return len(LatenessBounds)
}

// WebhookDeliveryLag implements webhook.LagObserver: one delivery's first
// attempt started d after its event's commit.
func (r *Recorder) WebhookDeliveryLag(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.slot().deliveryLag[latenessBucket(d.Seconds())]++
}

// TimerRequestsApplied implements requests.Observer.
func (r *Recorder) TimerRequestsApplied(applied, rejected int, lags []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.slot()
	s.requestsApplied += int64(applied)
	s.requestsRejected += int64(rejected)
	for _, d := range lags {
		s.requestLag[latenessBucket(d.Seconds())]++
	}
}

// Activity is what happened over a span of whole seconds, oldest first.
type Activity struct {
	// From is the start of the first second; the last one contains now.
	From time.Time
	// Per second: orders closed (by the scheduler or the sweeper), orders
	// whose close failed, close attempts that were no-ops, orders created.
	Closed, Failed, Stale, Created []int64
	// Lateness counts the closes of the span per bucket of LatenessBounds;
	// the last element is the +Inf bucket.
	Lateness []int64
	// Fired counts clients' timers fired per second; FireLateness their
	// fired_at - fire_at over the span, in Lateness's buckets.
	Fired, FireLateness []int64
	// DeliveryLag counts the webhook deliveries whose first attempt
	// started over the span, by the time from their event's commit, in
	// Lateness's buckets.
	DeliveryLag []int64
	// RequestsApplied and RequestsRejected count the timer requests of the
	// span; RequestLag their lag from requested_at to applied, in
	// Lateness's buckets.
	RequestsApplied, RequestsRejected int64
	RequestLag                        []int64
	// Reminded and RemindSkipped count order reminders sent and skipped
	// per second; RemindLateness the sent ones' sent_at − remind_at over
	// the span, in Lateness's buckets.
	Reminded, RemindSkipped, RemindLateness []int64
}

// Activity returns the last span of activity up to now, in whole seconds
// (span is rounded up to a second and capped at RecorderSpan). Seconds with
// no activity are zeros. Reading does not change the recorder.
func (r *Recorder) Activity(now time.Time, span time.Duration) Activity {
	n := int64(min(max((span+time.Second-1)/time.Second, 1), RecorderSpan/time.Second))
	last := now.Unix()
	a := Activity{
		From:     time.Unix(last-n+1, 0).UTC(),
		Closed:   make([]int64, n),
		Failed:   make([]int64, n),
		Stale:    make([]int64, n),
		Created:  make([]int64, n),
		Lateness: make([]int64, len(LatenessBounds)+1),
		Fired:    make([]int64, n),
		// The timers' histogram has the closes' buckets.
		FireLateness: make([]int64, len(LatenessBounds)+1),
		DeliveryLag:  make([]int64, len(LatenessBounds)+1),
		RequestLag:   make([]int64, len(LatenessBounds)+1),
	}
	a.Reminded, a.RemindSkipped, a.RemindLateness = make([]int64, n), make([]int64, n), make([]int64, len(LatenessBounds)+1)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		unix := last - n + 1 + i
		s := &r.ring[mod(unix, int64(len(r.ring)))]
		if s.unix != unix {
			continue
		}
		a.Closed[i], a.Failed[i], a.Stale[i], a.Created[i], a.Fired[i] = s.closed, s.failed, s.stale, s.created, s.fired
		for j, c := range s.lateness {
			a.Lateness[j] += c
		}
		for j, c := range s.fireLateness {
			a.FireLateness[j] += c
		}
		for j, c := range s.deliveryLag {
			a.DeliveryLag[j] += c
		}
		a.RequestsApplied += s.requestsApplied
		a.RequestsRejected += s.requestsRejected
		for j, c := range s.requestLag {
			a.RequestLag[j] += c
		}
		a.Reminded[i], a.RemindSkipped[i] = s.reminded, s.remindSkipped
		for j, c := range s.remindLateness {
			a.RemindLateness[j] += c
		}
	}
	return a
}

// sum adds up a per-second series.
func sum(xs []int64) int64 {
	var t int64
	for _, x := range xs {
		t += x
	}
	return t
}

// Quantile estimates the q-quantile (0 < q < 1) of a histogram with the
// given counts per bucket of LatenessBounds, the way Prometheus's
// histogram_quantile does: linear interpolation inside the bucket holding
// the rank, the highest finite bound when the rank falls in +Inf. It returns
// 0 for an empty histogram.
func Quantile(q float64, counts []int64) float64 {
	total := sum(counts)
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var cum float64
	for i, c := range counts {
		prev := cum
		cum += float64(c)
		if cum < rank || c == 0 {
			continue
		}
		if i == len(LatenessBounds) {
			return LatenessBounds[len(LatenessBounds)-1]
		}
		lo := 0.0
		if i > 0 {
			lo = LatenessBounds[i-1]
		}
		hi := LatenessBounds[i]
		return lo + (hi-lo)*(rank-prev)/float64(c)
	}
	return math.NaN() // unreachable: cum reaches total >= rank
}

// Reminded implements engine.ReminderObserver: one order reminder sent
// (its lateness being sent_at − remind_at) or skipped.
func (r *Recorder) Reminded(x hourglass.RemindedOrder, _ bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.slot()
	if x.Skipped {
		s.remindSkipped++
		return
	}
	s.reminded++
	s.remindLateness[latenessBucket(x.SentAt.Sub(x.RemindAt).Seconds())]++
}
