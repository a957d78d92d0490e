package retention

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// Defaults of TimerLimitConfig.
const (
	// TimerMaxDefault is how many timers may exist at once, whatever their
	// status: with payloads of up to 64 KiB, the most a client can make
	// the timers table hold before TimerRetention frees room.
	TimerMaxDefault = 10_000_000
	// CountEveryDefault is how often the timers are counted again.
	CountEveryDefault = 10 * time.Second
)

// TimerObserver is told the timer count and the refused creates, for
// metrics. It must be safe for concurrent use.
type TimerObserver interface {
	// TimersStored reports the timers counted (every status).
	TimersStored(n int64)
	// TimerRefused reports a create refused at the maximum.
	TimerRefused()
}

// TimerLimitConfig configures a TimerLimit; the zero value of each field
// means its default.
type TimerLimitConfig struct {
	// Max is the most timers that may exist (default TimerMaxDefault).
	Max int64
	// CountEvery is how old the count may grow before it is taken again
	// (default CountEveryDefault).
	CountEvery time.Duration
	Clock      hourglass.Clock
	Logger     *slog.Logger
	Observer   TimerObserver
}

// TimerLimit is a hourglass.TimerStore that refuses to create a timer once
// Max timers exist, with limit_exceeded (the API's 409, as for
// --webhook-max); re-arming, reading and cancelling existing timers are
// never refused. Fired and cancelled timers count until TimerRetention
// prunes them.
//
// The count is TimerCounts' (every status), taken at the first arm and
// again in the background once older than CountEvery, plus this value's
// creates since. It is approximate, so the bound is soft: each node may
// create up to what it and the others create in one CountEvery beyond Max.
// Counting at every create would read millions of index entries per
// request. Safe for concurrent use.
type TimerLimit struct {
	hourglass.TimerStore
	cfg TimerLimitConfig
	obs TimerObserver

	mu         sync.Mutex
	count      int64     // timers at countedAt, plus this value's creates since
	countedAt  time.Time // zero: never counted
	refreshing bool
}

// LimitTimers returns ts with its creates bounded by cfg.Max. It fails for a
// negative Max or CountEvery.
func LimitTimers(ts hourglass.TimerStore, cfg TimerLimitConfig) (*TimerLimit, error) {
	if cfg.Max < 0 || cfg.CountEvery < 0 {
		return nil, fmt.Errorf("retention: timer limit: Max and CountEvery must not be negative, got %d and %s", cfg.Max, cfg.CountEvery)
	}
	cfg.Max = cmp.Or(cfg.Max, TimerMaxDefault)
	cfg.CountEvery = cmp.Or(cfg.CountEvery, CountEveryDefault)
	if cfg.Clock == nil {
		cfg.Clock = hourglass.SystemClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	l := &TimerLimit{TimerStore: ts, cfg: cfg, obs: cfg.Observer}
	if l.obs == nil {
		l.obs = nopObserver{}
	}
	return l, nil
}

// ArmTimer implements hourglass.TimerStore: the store's ArmTimer, unless
// the timers are at Max and p.Key names no timer yet. Errors: those of the
// store's ArmTimer, and limit_exceeded.
func (l *TimerLimit) ArmTimer(ctx context.Context, p hourglass.ArmTimerParams) (hourglass.Timer, bool, error) {
	if l.counted(ctx) >= l.cfg.Max {
		if err := p.Validate(); err != nil {
			return hourglass.Timer{}, false, err
		}
		_, err := l.Timer(ctx, p.Key)
		if hourglass.ErrorCode(err) == hourglass.CodeNotFound {
			l.obs.TimerRefused()
			return hourglass.Timer{}, false, hourglass.TimerLimitError(l.cfg.Max)
		}
		if err != nil {
			return hourglass.Timer{}, false, err
		}
	}
	t, created, err := l.TimerStore.ArmTimer(ctx, p)
	if err == nil && created {
		l.mu.Lock()
		l.count++
		l.mu.Unlock()
	}
	return t, created, err
}

// TimerRoom returns how many timers may still be created by the count
// (at least 0), and Max: the timer_requests applier's bound
// (requests.Limit), the same as ArmTimer's.
func (l *TimerLimit) TimerRoom(ctx context.Context) (room, limit int64) {
	return max(l.cfg.Max-l.counted(ctx), 0), l.cfg.Max
}

// TimersCreated counts n timers created elsewhere (the timer_requests
// applier) until the next count.
func (l *TimerLimit) TimersCreated(n int) {
	l.mu.Lock()
	l.count += int64(n)
	l.mu.Unlock()
}

// counted returns the count: taken now at the first call (the caller
// waits), else as it stands while a stale one is taken again in the
// background.
func (l *TimerLimit) counted(ctx context.Context) int64 {
	l.mu.Lock()
	first, stale := l.countedAt.IsZero(), l.cfg.Clock.Now().Sub(l.countedAt) >= l.cfg.CountEvery
	start := stale && !l.refreshing
	if start {
		l.refreshing = true
	}
	n := l.count
	l.mu.Unlock()
	switch {
	case first && start:
		l.recount(ctx)
	case start:
		// Detached from the request: bounded by its own timeout.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l.recount(ctx)
		}()
		return n
	default:
		return n
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count
}

// recount takes the count from the store; on an error it keeps the old
// one (the store's own error then reaches the arms).
func (l *TimerLimit) recount(ctx context.Context) {
	at := l.cfg.Clock.Now()
	counts, err := l.TimerCounts(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refreshing = false
	if err != nil {
		l.cfg.Logger.Warn("retention: counting timers failed; keeping the last count", "err", err)
		return
	}
	var n int64
	for _, c := range counts {
		n += c
	}
	l.count, l.countedAt = n, at
	l.obs.TimersStored(n)
}

func (nopObserver) TimersStored(int64) {}
func (nopObserver) TimerRefused()      {}
