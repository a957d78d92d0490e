// Package dashboard is hourglass's operator page: static HTML, CSS and
// JavaScript embedded in the binary (no CDN, no build step), and the data it
// polls from GET /v1/dashboard, assembled by Source from the store's index
// (orders and clients' timers), the alert Recorder and the alert Evaluator.
//
// The page (assets/index.html) is public; it holds no data. Its script
// reads the API token from ?token= once (then drops it from the address bar)
// or asks for it when the API answers 401, keeps it in the tab's
// sessionStorage and sends it as "Authorization: Bearer" on every call.
package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/alert"
)

// assets is the page; read it through Assets.
//
//go:embed assets
var assets embed.FS

// Assets returns the page's files: index.html and the files it loads, at the
// root of the returned FS. It cannot fail.
func Assets() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic("dashboard: embedded assets missing: " + err.Error()) // a build error, not a runtime one
	}
	return sub
}

// The shape of the data, fixed so the page can lay it out.
const (
	// DueBucket and DueBuckets: the timeline of closes due covers the next
	// DueBuckets*DueBucket (5 minutes) in 10-second buckets.
	DueBucket  = 10 * time.Second
	DueBuckets = 30
	// RatesSpan is how far back closes/s and creates/s go, per second.
	RatesSpan = alert.RecorderSpan
	// DeliveryLagSpan is how far back the webhook delivery lag's p50 and
	// p99 go.
	DeliveryLagSpan = time.Minute
	// CacheForDefault is how long a snapshot is reused: the order counts
	// scan the whole (status, deadline) index, so many open pages must not
	// each pay for it.
	CacheForDefault = time.Second
)

// Stats are the store queries the dashboard needs; every
// hourglass.StatsStore implements them.
type Stats interface {
	// OrderCounts returns the number of orders per state as the API shows
	// them at now (an overdue pending order counts as closed).
	OrderCounts(ctx context.Context, now time.Time) (map[hourglass.State]int64, error)
	// CountPendingDue counts pending orders due at or before until, up to limit.
	CountPendingDue(ctx context.Context, until time.Time, limit int) (int, error)
	// PendingDeadlineBuckets counts pending orders per deadline bucket
	// (from + i*width, from + (i+1)*width].
	PendingDeadlineBuckets(ctx context.Context, from time.Time, width time.Duration, n int) ([]int64, error)
}

// TimerCounter counts clients' timers by status; every hourglass.TimerStore
// implements it.
type TimerCounter interface {
	// TimerCounts returns how many timers are in each status.
	TimerCounts(ctx context.Context) (map[hourglass.TimerStatus]int64, error)
}

// FanoutCounter counts the close batches whose webhook deliveries are
// deferred (the fanout_pending table); every store implements it.
type FanoutCounter interface {
	FanoutPending(ctx context.Context) (int, error)
}

// AlertSource is the state of the alert rules (*alert.Evaluator).
type AlertSource interface {
	Status() []alert.Status
}

// Config configures a Source. Stats and Activity are required.
type Config struct {
	Stats    Stats
	Activity alert.ActivitySource
	// Alerts, when nil, shows no alert rules.
	Alerts AlertSource
	// DeadLetters, when nil, shows dead_letters as null (no webhooks).
	DeadLetters alert.DeadLetterCounter
	// Timers, when nil, shows timers as null (no timer store).
	Timers TimerCounter
	// Fanout, when nil, shows fanout_pending as null.
	Fanout FanoutCounter
	// DeliveryLag shows the webhook delivery lag, which Activity records
	// (alert.Recorder.WebhookDeliveryLag); false shows it as null (no
	// webhooks).
	DeliveryLag bool
	// TimerRequests, when set, shows the timer requests applied from
	// timer_requests (their count and lag over DeliveryLagSpan, which
	// Activity records: alert.Recorder.TimerRequestsApplied) and the
	// rejected ones kept; nil shows timer_requests as null.
	TimerRequests RejectedCounter
	// Sources, when set, shows the shops' own tables this node closes
	// (--sources); nil shows sources as null.
	Sources SourceStats
	// CacheFor is how long a snapshot is reused (default 1s; negative: never).
	CacheFor time.Duration
}

// Source assembles dashboard snapshots. It is safe for concurrent use;
// concurrent callers within CacheFor share one snapshot (and one set of
// queries).
type Source struct {
	cfg Config

	mu   sync.Mutex
	last *Snapshot
	at   time.Time
}

// New returns a Source, or an error naming a missing dependency.
func New(cfg Config) (*Source, error) {
	if cfg.Stats == nil || cfg.Activity == nil {
		return nil, errors.New("dashboard: Stats and Activity are required")
	}
	if cfg.CacheFor == 0 {
		cfg.CacheFor = CacheForDefault
	}
	return &Source{cfg: cfg}, nil
}

// Snapshot is the JSON of GET /v1/dashboard. Times are RFC 3339 UTC with
// milliseconds; series are oldest first.
type Snapshot struct {
	// Now is when the snapshot was taken.
	Now string `json:"now"`
	// Orders is the number of orders in each state (every state present),
	// as GET /v1/orders?status= counts them.
	Orders map[string]int64 `json:"orders"`
	// Overdue is the close backlog: pending orders at or past their deadline
	// not closed yet (counted up to alert.BacklogCountCap).
	Overdue int `json:"overdue"`
	// Due is the timeline of closes ahead.
	Due Due `json:"due"`
	// Rates are closes, creates and failed closes per second.
	Rates Rates `json:"rates"`
	// Lateness is the close-lateness histogram over the rates' span.
	Lateness Lateness `json:"lateness"`
	// Alerts is every built-in rule's state, in rule order.
	Alerts []Alert `json:"alerts"`
	// DeadLetters is the size of the dead-letter list; null when webhooks
	// are not available.
	DeadLetters *int `json:"dead_letters"`
	// Timers are clients' named timers; null when the server keeps none.
	Timers *Timers `json:"timers"`
	// FanoutPending is the number of close batches of a burst whose
	// order.closed webhook deliveries are deferred and not created yet
	// (hourglass_fanout_pending); null when not available.
	FanoutPending *int `json:"fanout_pending"`
	// DeliveryLag is the time from an event's commit to its webhook
	// delivery's first attempt over the last DeliveryLagSpan
	// (hourglass_webhook_delivery_lag_seconds, as seen by this node); null
	// without webhooks.
	DeliveryLag *DeliveryLag `json:"delivery_lag"`
	// TimerRequests are the timer requests shops wrote in their own
	// transactions: applied and rejected over the last DeliveryLagSpan,
	// their lag from requested_at to applied
	// (hourglass_timer_request_lag_seconds, as seen by this node), and the
	// rejected ones kept (GET /v1/timer-requests/rejected); null when the
	// store applies none.
	TimerRequests *TimerRequests `json:"timer_requests"`
	// Sources are the shops' own tables this node closes (--sources), in
	// the file's order; null without sources.
	Sources []SourceStat `json:"sources"`
	// Reminders are the order reminders (order.expiring) this node sent
	// and skipped per second, and the sent ones' lateness, over the
	// rates' span.
	Reminders Reminders `json:"reminders"`
}

// Reminders summarises order reminders: Sent and Skipped per second,
// Lateness (sent_at − remind_at) over the span.
type Reminders struct {
	Sent     []int64  `json:"sent"`
	Skipped  []int64  `json:"skipped"`
	Lateness Lateness `json:"lateness"`
}

// SourceStats reports the sources this node closes (source.Runner, through
// the node).
type SourceStats interface {
	SourceStats() []SourceStat
}

// SourceStat is one source as this node has seen it since it started.
type SourceStat struct {
	Name string `json:"name"`
	// Held is the rows held in memory: pending and due within the window.
	Held        int   `json:"held"`
	Closes      int64 `json:"closes"`
	Noops       int64 `json:"noops"`
	GuardErrors int64 `json:"guard_errors"`
	CloseErrors int64 `json:"close_errors"`
	// Swept is the rows the sweeper closed (0 in steady state).
	Swept int64 `json:"swept"`
	// LatenessP50Seconds and LatenessP99Seconds are over the last closes
	// (up to 1,024).
	LatenessP50Seconds float64 `json:"lateness_p50_seconds"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
	// Misconfigured: its guard changed several rows within 10 minutes.
	Misconfigured bool `json:"misconfigured"`
	// BadRows is how many pending rows with a bad key or deadline this
	// node found and skips; BadRowList the latest (newest first, at most
	// 100).
	BadRows    int64          `json:"bad_rows"`
	BadRowList []SourceBadRow `json:"bad_row_list"`
}

// SourceBadRow is a pending row a source skips: its key and deadline as
// the database writes them, why, and when this node found it.
type SourceBadRow struct {
	Key      string `json:"key"`
	Deadline string `json:"deadline"`
	Reason   string `json:"reason"`
	FoundAt  string `json:"found_at"`
}

// RejectedCounter counts the rejected timer requests kept
// (hourglass.TimerRequestStore has it).
type RejectedCounter interface {
	RejectedTimerRequestCount(ctx context.Context) (int64, error)
}

// TimerRequests summarises the timer requests of the last WindowSeconds.
type TimerRequests struct {
	WindowSeconds int     `json:"window_seconds"`
	Applied       int64   `json:"applied"`
	Rejected      int64   `json:"rejected"`
	P50Seconds    float64 `json:"lag_p50_seconds"`
	P99Seconds    float64 `json:"lag_p99_seconds"`
	// RejectedKept is the number of rejected requests listed, all time
	// (until retention prunes them).
	RejectedKept int64 `json:"rejected_kept"`
}

// DeliveryLag summarises the webhook delivery lag of the first attempts
// made over the last WindowSeconds: how many, and their p50 and p99
// (interpolated within Lateness's buckets; 0 when there were none).
type DeliveryLag struct {
	WindowSeconds int     `json:"window_seconds"`
	Deliveries    int64   `json:"deliveries"`
	P50Seconds    float64 `json:"p50_seconds"`
	P99Seconds    float64 `json:"p99_seconds"`
}

// Timers shows clients' timers as the orders are shown: how many are in
// each status, fires per second over the rates' span (from Rates.From), and
// the fire-lateness (fired_at - fire_at) histogram in Lateness's buckets.
type Timers struct {
	// Counts is the number of timers in each status (every status present),
	// as GET /v1/timers?status= lists them.
	Counts   map[string]int64 `json:"counts"`
	Fires    []int64          `json:"fires"`
	Lateness Lateness         `json:"lateness"`
}

// Due counts pending orders by deadline: Counts[i] are due in
// (From + i*BucketSeconds, From + (i+1)*BucketSeconds].
type Due struct {
	From          string  `json:"from"`
	BucketSeconds int     `json:"bucket_seconds"`
	Counts        []int64 `json:"counts"`
}

// Rates are per-second counts: element i is the second starting at
// From + i*StepSeconds; the last one is the current, partial second.
type Rates struct {
	From          string  `json:"from"`
	StepSeconds   int     `json:"step_seconds"`
	Closes        []int64 `json:"closes"`
	Creates       []int64 `json:"creates"`
	CloseFailures []int64 `json:"close_failures"`
}

// Lateness is a histogram of closed_at - deadline over the last
// WindowSeconds: Counts[i] closes were at most BoundsSeconds[i] late (and
// more than BoundsSeconds[i-1]); the last count is beyond the last bound.
type Lateness struct {
	WindowSeconds int       `json:"window_seconds"`
	BoundsSeconds []float64 `json:"bounds_seconds"`
	Counts        []int64   `json:"counts"`
	P99Seconds    float64   `json:"p99_seconds"`
}

// Alert is one rule's state.
type Alert struct {
	Rule      string  `json:"rule"`
	State     string  `json:"state"` // "firing" or "ok"
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	Summary   string  `json:"summary"`
	// Since is when it started firing; null when it is not firing.
	Since *string `json:"since"`
	// Error is why the last evaluation could not read the value; null if it could.
	Error *string `json:"error"`
}

const timeFormat = "2006-01-02T15:04:05.000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeFormat) }

// Snapshot returns the dashboard's data at now, or the one taken less than
// CacheFor before now. It fails only when a store query fails (the error is
// wrapped with the query's name).
func (s *Source) Snapshot(ctx context.Context, now time.Time) (*Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && s.cfg.CacheFor > 0 && !now.Before(s.at) && now.Sub(s.at) < s.cfg.CacheFor {
		return s.last, nil
	}
	snap, err := s.take(ctx, now)
	if err != nil {
		return nil, err
	}
	s.last, s.at = snap, now
	return snap, nil
}

func (s *Source) take(ctx context.Context, now time.Time) (*Snapshot, error) {
	counts, err := s.cfg.Stats.OrderCounts(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("dashboard: order counts: %w", err)
	}
	overdue, err := s.cfg.Stats.CountPendingDue(ctx, now, alert.BacklogCountCap)
	if err != nil {
		return nil, fmt.Errorf("dashboard: close backlog: %w", err)
	}
	due, err := s.cfg.Stats.PendingDeadlineBuckets(ctx, now, DueBucket, DueBuckets)
	if err != nil {
		return nil, fmt.Errorf("dashboard: closes due: %w", err)
	}
	snap := &Snapshot{
		Now:     formatTime(now),
		Orders:  make(map[string]int64, len(counts)),
		Overdue: overdue,
		Due:     Due{From: formatTime(now), BucketSeconds: int(DueBucket / time.Second), Counts: due},
		Alerts:  []Alert{},
	}
	for _, st := range hourglass.States() {
		snap.Orders[string(st)] = counts[st]
	}
	a := s.cfg.Activity.Activity(now, RatesSpan)
	snap.Reminders = Reminders{Sent: a.Reminded, Skipped: a.RemindSkipped, Lateness: Lateness{WindowSeconds: len(a.Reminded),
		BoundsSeconds: alert.LatenessBounds[:], Counts: a.RemindLateness, P99Seconds: alert.Quantile(0.99, a.RemindLateness)}}
	snap.Rates = Rates{From: formatTime(a.From), StepSeconds: 1, Closes: a.Closed, Creates: a.Created, CloseFailures: a.Failed}
	snap.Lateness = Lateness{
		WindowSeconds: len(a.Closed),
		BoundsSeconds: alert.LatenessBounds[:],
		Counts:        a.Lateness,
		P99Seconds:    alert.Quantile(0.99, a.Lateness),
	}
	if s.cfg.Alerts != nil {
		for _, st := range s.cfg.Alerts.Status() {
			al := Alert{Rule: st.Rule, State: "ok", Value: st.Value, Threshold: st.Threshold, Summary: st.Summary}
			if st.Firing {
				al.State = alert.StateFiring
				since := formatTime(st.Since)
				al.Since = &since
			}
			if st.Err != "" {
				e := st.Err
				al.Error = &e
			}
			snap.Alerts = append(snap.Alerts, al)
		}
	}
	if s.cfg.Timers != nil {
		counts, err := s.cfg.Timers.TimerCounts(ctx)
		if err != nil {
			return nil, fmt.Errorf("dashboard: timer counts: %w", err)
		}
		tm := &Timers{Counts: map[string]int64{}, Fires: a.Fired, Lateness: Lateness{
			WindowSeconds: len(a.Fired),
			BoundsSeconds: alert.LatenessBounds[:],
			Counts:        a.FireLateness,
			P99Seconds:    alert.Quantile(0.99, a.FireLateness),
		}}
		for _, st := range []hourglass.TimerStatus{hourglass.TimerScheduled, hourglass.TimerFired, hourglass.TimerCancelled} {
			tm.Counts[string(st)] = counts[st]
		}
		snap.Timers = tm
	}
	if s.cfg.DeadLetters != nil {
		n, err := s.cfg.DeadLetters.DeadLetterCount(ctx)
		if err != nil {
			return nil, fmt.Errorf("dashboard: dead letters: %w", err)
		}
		snap.DeadLetters = &n
	}
	if s.cfg.Fanout != nil {
		n, err := s.cfg.Fanout.FanoutPending(ctx)
		if err != nil {
			return nil, fmt.Errorf("dashboard: deferred fan-outs: %w", err)
		}
		snap.FanoutPending = &n
	}
	if s.cfg.DeliveryLag {
		lag := s.cfg.Activity.Activity(now, DeliveryLagSpan).DeliveryLag
		var n int64
		for _, c := range lag {
			n += c
		}
		snap.DeliveryLag = &DeliveryLag{
			WindowSeconds: int(DeliveryLagSpan / time.Second),
			Deliveries:    n,
			P50Seconds:    alert.Quantile(0.5, lag),
			P99Seconds:    alert.Quantile(0.99, lag),
		}
	}
	if s.cfg.TimerRequests != nil {
		kept, err := s.cfg.TimerRequests.RejectedTimerRequestCount(ctx)
		if err != nil {
			return nil, fmt.Errorf("dashboard: rejected timer requests: %w", err)
		}
		a := s.cfg.Activity.Activity(now, DeliveryLagSpan)
		snap.TimerRequests = &TimerRequests{
			WindowSeconds: int(DeliveryLagSpan / time.Second),
			Applied:       a.RequestsApplied,
			Rejected:      a.RequestsRejected,
			P50Seconds:    alert.Quantile(0.5, a.RequestLag),
			P99Seconds:    alert.Quantile(0.99, a.RequestLag),
			RejectedKept:  kept,
		}
	}
	if s.cfg.Sources != nil {
		snap.Sources = s.cfg.Sources.SourceStats()
	}
	return snap, nil
}
