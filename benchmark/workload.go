package benchmark

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// Timeouts is the distribution of order timeouts in a workload.
type Timeouts struct {
	Min, Max time.Duration // uniform in [Min, Max]; Min == Max for a constant
	// Mix, when set, draws from the documents' category mix instead: half
	// "virtual" (5 min) and half "physical" (30 min), each multiplied by Scale.
	Mix   bool
	Scale float64
}

// ParseTimeouts parses "2s", "1s..10s" or "mix" (with scale, e.g. 0.01 turns
// 5 min / 30 min into 3 s / 18 s). Every timeout must be within the
// service's bounds (1 s to 7 days).
func ParseTimeouts(s string, scale float64) (Timeouts, error) {
	check := func(d time.Duration) error {
		return hourglass.ValidateTimeout("--timeout", d)
	}
	if s == "mix" {
		if scale <= 0 || scale > 1 {
			return Timeouts{}, fmt.Errorf("--time-scale must be in (0, 1], got %v", scale)
		}
		t := Timeouts{Mix: true, Scale: scale}
		for _, d := range []time.Duration{scaled(5*time.Minute, scale), scaled(30*time.Minute, scale)} {
			if err := check(d); err != nil {
				return Timeouts{}, fmt.Errorf("--timeout mix at --time-scale %v gives %s: %w", scale, d, err)
			}
		}
		return t, nil
	}
	lo, hi, isRange := strings.Cut(s, "..")
	min, err := time.ParseDuration(lo)
	if err != nil {
		return Timeouts{}, fmt.Errorf("--timeout %q: want a duration like 2s, a range like 1s..10s, or mix", s)
	}
	max := min
	if isRange {
		if max, err = time.ParseDuration(hi); err != nil || max < min {
			return Timeouts{}, fmt.Errorf("--timeout %q: the range's upper end must be a duration >= its lower end", s)
		}
	}
	if err := check(min); err != nil {
		return Timeouts{}, err
	}
	if err := check(max); err != nil {
		return Timeouts{}, err
	}
	return Timeouts{Min: min, Max: max}, nil
}

func scaled(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) * scale).Truncate(time.Millisecond)
}

// Draw returns one timeout.
func (t Timeouts) Draw(r *rand.Rand) time.Duration {
	if t.Mix {
		if r.IntN(2) == 0 {
			return scaled(5*time.Minute, t.Scale)
		}
		return scaled(30*time.Minute, t.Scale)
	}
	if t.Max == t.Min {
		return t.Min
	}
	return (t.Min + time.Duration(r.Int64N(int64(t.Max-t.Min)+1))).Truncate(time.Millisecond)
}

// Shortest returns the smallest timeout Draw can return.
func (t Timeouts) Shortest() time.Duration {
	if t.Mix {
		return scaled(5*time.Minute, t.Scale)
	}
	return t.Min
}

// Longest returns the largest timeout Draw can return.
func (t Timeouts) Longest() time.Duration {
	if t.Mix {
		return scaled(30*time.Minute, t.Scale)
	}
	return t.Max
}

// String describes the distribution.
func (t Timeouts) String() string {
	switch {
	case t.Mix:
		return fmt.Sprintf("mix (virtual %s / physical %s)", scaled(5*time.Minute, t.Scale), scaled(30*time.Minute, t.Scale))
	case t.Min == t.Max:
		return t.Min.String()
	}
	return t.Min.String() + ".." + t.Max.String()
}

// Workload is the same for every system in a run.
type Workload struct {
	Rate     int           // orders created per second, open loop
	Duration time.Duration // how long orders are created
	Timeouts Timeouts
	// PayFraction of orders are paid; RaceFraction of those payments are
	// aimed at the deadline ± RaceJitter, the rest land well before it.
	PayFraction  float64
	RaceFraction float64
	RaceJitter   time.Duration
	// Grace: an order not closed by its deadline + Grace counts as lost by
	// the mechanism (the sweeper, or nothing, closed it).
	Grace time.Duration
	// RemindBefore, when set, is every order's reminder lead: its
	// order.expiring is due at deadline − RemindBefore (issue #41), and the
	// run measures the reminders too (Result.Reminders).
	RemindBefore time.Duration
	Seed         uint64
}

// Validate checks the workload, naming the flag at fault.
func (w Workload) Validate() error {
	switch {
	case w.Rate < 1 || w.Rate > 200000:
		return fmt.Errorf("--rate must be 1..200000 orders/s, got %d", w.Rate)
	case w.Duration < 100*time.Millisecond || w.Duration > 24*time.Hour:
		return fmt.Errorf("--duration must be 100ms..24h, got %s", w.Duration)
	case w.PayFraction < 0 || w.PayFraction > 1:
		return fmt.Errorf("--pay-fraction must be in [0, 1], got %v", w.PayFraction)
	case w.RaceFraction < 0 || w.RaceFraction > 1:
		return fmt.Errorf("--race-fraction must be in [0, 1], got %v", w.RaceFraction)
	case w.Grace < 100*time.Millisecond:
		return fmt.Errorf("--grace must be at least 100ms, got %s", w.Grace)
	case w.RemindBefore < 0 || w.RemindBefore%time.Millisecond != 0:
		return fmt.Errorf("--remind-before must be 0 (none) or a positive whole number of ms, got %s", w.RemindBefore)
	case w.RemindBefore > 0 && w.RemindBefore >= w.Timeouts.Shortest():
		return fmt.Errorf("--remind-before %s must be shorter than the shortest --timeout (%s): a longer lead sends no reminder", w.RemindBefore, w.Timeouts.Shortest())
	}
	if err := hourglass.ValidateRemindBefore("--remind-before", w.RemindBefore); err != nil {
		return err
	}
	return nil
}
