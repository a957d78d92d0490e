package hourglass

import (
	"cmp"
	"time"
)

// Timeout bounds and default.
const (
	MinTimeout     = time.Second
	MaxTimeout     = 7 * 24 * time.Hour
	DefaultTimeout = 30 * time.Minute
)

// Policy says how long an unpaid order lives. The timeout of an order is the
// request's own, else the smallest among its items' categories' timeouts,
// else DefaultTimeout.
type Policy struct {
	DefaultTimeout time.Duration            // zero means the package DefaultTimeout
	Categories     map[string]time.Duration // category → timeout
	// RemindBefore is the default reminder lead (0: no reminder), and
	// RemindCategories a category's own (RemindLead).
	RemindBefore     time.Duration
	RemindCategories map[string]time.Duration
}

// Timeout returns the timeout of an order whose items have these categories.
func (p Policy) Timeout(categories []string) time.Duration {
	var best time.Duration
	for _, c := range categories {
		if t, ok := p.Categories[c]; ok && (best == 0 || t < best) {
			best = t
		}
	}
	if best != 0 {
		return best
	}
	return cmp.Or(p.DefaultTimeout, DefaultTimeout)
}

// ValidateTimeout checks that d is within MinTimeout..MaxTimeout; field names
// the input in the error message.
func ValidateTimeout(field string, d time.Duration) error {
	if d < MinTimeout || d > MaxTimeout {
		return Errorf(CodeInvalidArgument, "%s: must be between %d and %d ms, got %d", field,
			MinTimeout.Milliseconds(), MaxTimeout.Milliseconds(), d.Milliseconds())
	}
	return nil
}

// Validate checks every timeout of p and every category name.
func (p Policy) Validate() error {
	if err := ValidateTimeout("default_timeout_ms", p.DefaultTimeout); err != nil {
		return err
	}
	if len(p.Categories) > 1000 {
		return Errorf(CodeInvalidArgument, "categories: at most 1000, got %d", len(p.Categories))
	}
	for c, d := range p.Categories {
		if c == "" || len(c) > 64 {
			return Errorf(CodeInvalidArgument, "categories: name %q must be 1 to 64 bytes", c)
		}
		if err := CheckText("categories: a name", c); err != nil {
			return err
		}
		if err := ValidateTimeout("categories."+c, d); err != nil {
			return err
		}
	}
	return p.validateReminders()
}

// validateReminders checks the reminder leads of p.
func (p Policy) validateReminders() error {
	if err := ValidateRemindBefore("remind_before_ms", p.RemindBefore); err != nil {
		return err
	}
	if len(p.RemindCategories) > 1000 {
		return Errorf(CodeInvalidArgument, "remind_before_categories: at most 1000, got %d", len(p.RemindCategories))
	}
	for c, d := range p.RemindCategories {
		if c == "" || len(c) > 64 {
			return Errorf(CodeInvalidArgument, "remind_before_categories: name %q must be 1 to 64 bytes", c)
		}
		if err := CheckText("remind_before_categories: a name", c); err != nil {
			return err
		}
		if err := ValidateRemindBefore("remind_before_categories."+c, d); err != nil {
			return err
		}
	}
	return nil
}
