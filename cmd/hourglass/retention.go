package main

import (
	"fmt"
	"time"

	"github.com/hourglass/hourglass/retention"
)

// retentionFlags bound what clients grow in the database (package
// retention). --event-retention is with the webhook flags.
type retentionFlags struct {
	IdempotencyRetention time.Duration `help:"How long an idempotency key is kept; a create replayed later makes a new order (0: forever)." default:"24h" env:"HOURGLASS_IDEMPOTENCY_RETENTION"`
	TimerRetention       time.Duration `help:"How long fired and cancelled timers, and timers' events no delivery needs, are kept (0: forever)." default:"168h" env:"HOURGLASS_TIMER_RETENTION"`
	TimerMax             int64         `help:"How many timers may exist at once, any status (counted every 10s, so about); a create beyond it is refused with 409 limit_exceeded." default:"10000000" env:"HOURGLASS_TIMER_MAX"`
	DeadLetterMax        int           `help:"How many webhook dead letters are kept; beyond it the oldest are dropped (counted in hourglass_dead_letters_dropped_total; the dead_letters_near_max alert fires at 90%)." default:"100000" env:"HOURGLASS_DEAD_LETTER_MAX"`
	PruneInterval        time.Duration `help:"How often the cluster's leader prunes what outlived its retention, in batches of 500 rows." default:"1m" env:"HOURGLASS_PRUNE_INTERVAL"`
}

// config returns the retention.Config the flags describe (with events kept
// eventRetention, the webhook flags' --event-retention), or an error naming
// the flag to fix.
func (f *retentionFlags) config(eventRetention time.Duration) (retention.Config, error) {
	for _, r := range []struct {
		flag string
		d    time.Duration
	}{{"--idempotency-retention", f.IdempotencyRetention}, {"--timer-retention", f.TimerRetention}, {"--event-retention", eventRetention}} {
		if r.d < 0 || (r.d > 0 && r.d < time.Minute) {
			return retention.Config{}, fmt.Errorf("%s: must be 0 (forever) or at least 1m, got %s", r.flag, r.d)
		}
	}
	switch {
	case f.TimerMax < 1 || f.TimerMax > 1_000_000_000:
		return retention.Config{}, fmt.Errorf("--timer-max: must be between 1 and 1000000000, got %d", f.TimerMax)
	case f.DeadLetterMax < 1 || f.DeadLetterMax > 100_000_000:
		return retention.Config{}, fmt.Errorf("--dead-letter-max: must be between 1 and 100000000, got %d", f.DeadLetterMax)
	case f.PruneInterval < time.Second || f.PruneInterval > 24*time.Hour:
		return retention.Config{}, fmt.Errorf("--prune-interval: must be between 1s and 24h, got %s", f.PruneInterval)
	}
	// The flags' zero means forever; the config's zero means the default.
	forever := func(d time.Duration) time.Duration {
		if d == 0 {
			return -1
		}
		return d
	}
	cfg := retention.Config{
		IdempotencyRetention: forever(f.IdempotencyRetention),
		TimerRetention:       forever(f.TimerRetention),
		EventRetention:       forever(eventRetention),
		DeadLetterMax:        f.DeadLetterMax,
		Interval:             f.PruneInterval,
	}
	return cfg, cfg.Validate()
}
