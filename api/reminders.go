package api

import (
	"time"

	"github.com/hourglass/hourglass"
)

// decodeRemindBefore checks a reminder lead in ms (0: none) before it is
// converted, so a huge value cannot overflow into a valid-looking
// duration.
func decodeRemindBefore(field string, ms int64) (time.Duration, error) {
	if ms != 0 && (ms < hourglass.MinTimeout.Milliseconds() || ms > hourglass.MaxTimeout.Milliseconds()) {
		return 0, hourglass.Errorf(hourglass.CodeInvalidArgument, "%s: must be 0 (no reminder) or between %d and %d, got %d",
			field, hourglass.MinTimeout.Milliseconds(), hourglass.MaxTimeout.Milliseconds(), ms)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// decodePolicyReminders sets the reminder leads of a PUT /v1/policies
// body on p (absent: none).
func decodePolicyReminders(req putPolicyRequest, p *hourglass.Policy) error {
	if req.RemindBeforeMs != nil {
		d, err := decodeRemindBefore("remind_before_ms", *req.RemindBeforeMs)
		if err != nil {
			return err
		}
		p.RemindBefore = d
	}
	for c, ms := range req.RemindBeforeCategories {
		d, err := decodeRemindBefore("remind_before_categories."+c, ms)
		if err != nil {
			return err
		}
		if p.RemindCategories == nil {
			p.RemindCategories = make(map[string]time.Duration, len(req.RemindBeforeCategories))
		}
		p.RemindCategories[c] = d
	}
	return nil
}
