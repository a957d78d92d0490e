package timerloop

import (
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing/wheel"
)

// NewWheel returns an empty scheduler over hourglass's hierarchical timing
// wheel (package wheel): the loop sleeps until the wheel's next non-empty
// slot; Schedule and Cancel are O(1), about 36 bytes per timer. It is the
// default timing of everything hourglass times in memory (the engine's
// order deadlines, webhook delivery attempts) and, named "wheel", the
// default delay mechanism. It cannot fail: there is nothing to connect to.
func NewWheel(cfg Config) *Scheduler {
	clock := hourglass.WithTimers(cfg.Clock)
	cfg.Clock = clock
	if cfg.Name == "" {
		cfg.Name = "wheel"
	}
	return New(wheelTimers{wheel.New(hourglass.UnixMilli(clock.Now()))}, cfg)
}

// wheelTimers adapts the wheel (uint64 ids) to Timers.
type wheelTimers struct{ w *wheel.Wheel }

func (t wheelTimers) Add(id, deadline int64) { t.w.Add(uint64(id), deadline) }
func (t wheelTimers) Remove(id int64) bool   { return t.w.Cancel(uint64(id)) }
func (t wheelTimers) Len() int               { return t.w.Len() }
func (t wheelTimers) Next() (int64, bool)    { return t.w.NextDeadline() }
func (t wheelTimers) PopDue(now int64, fire func(id, deadline int64)) int {
	return t.w.Advance(now, func(id uint64, deadline int64) { fire(int64(id), deadline) })
}
