package main

import (
	"strings"
	"testing"
	"time"
)

// TestRetentionFlags: each flag's range is checked with a message naming
// it, and a zero retention means forever (negative in retention.Config).
func TestRetentionFlags(t *testing.T) {
	t.Parallel()
	defaults := retentionFlags{IdempotencyRetention: 24 * time.Hour, TimerRetention: 168 * time.Hour, TimerMax: 10_000_000,
		DeadLetterMax: 100_000, PruneInterval: time.Minute}
	for _, tt := range []struct {
		name   string
		change func(*retentionFlags, *time.Duration)
		want   string // "" for no error
	}{
		{"defaults", func(*retentionFlags, *time.Duration) {}, ""},
		{"forever", func(f *retentionFlags, e *time.Duration) { f.IdempotencyRetention, f.TimerRetention, *e = 0, 0, 0 }, ""},
		{"short key retention", func(f *retentionFlags, _ *time.Duration) { f.IdempotencyRetention = time.Second }, "--idempotency-retention"},
		{"negative timer retention", func(f *retentionFlags, _ *time.Duration) { f.TimerRetention = -time.Hour }, "--timer-retention"},
		{"short event retention", func(_ *retentionFlags, e *time.Duration) { *e = time.Second }, "--event-retention"},
		{"no timers", func(f *retentionFlags, _ *time.Duration) { f.TimerMax = 0 }, "--timer-max"},
		{"no dead letters", func(f *retentionFlags, _ *time.Duration) { f.DeadLetterMax = 0 }, "--dead-letter-max"},
		{"prune too often", func(f *retentionFlags, _ *time.Duration) { f.PruneInterval = time.Millisecond }, "--prune-interval"},
	} {
		f, events := defaults, 168*time.Hour
		tt.change(&f, &events)
		cfg, err := f.config(events)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: error %v, want one naming %s", tt.name, err, tt.want)
		}
		if tt.name == "forever" && (cfg.IdempotencyRetention >= 0 || cfg.TimerRetention >= 0 || cfg.EventRetention >= 0) {
			t.Errorf("zero flags gave %+v; want every retention forever (negative)", cfg)
		}
		if tt.name == "defaults" && (cfg.IdempotencyRetention != 24*time.Hour || cfg.DeadLetterMax != 100_000 || cfg.Interval != time.Minute) {
			t.Errorf("default flags gave %+v", cfg)
		}
	}
}
