package node

import (
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/engine"
)

// Reminded tells the observers that watch reminders
// (engine.ReminderObserver).
func (os engineObservers) Reminded(r hourglass.RemindedOrder, swept bool) {
	for _, o := range os {
		if ro, ok := o.(engine.ReminderObserver); ok {
			ro.Reminded(r, swept)
		}
	}
}
