package hourglass_test

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func TestPolicyTimeout(t *testing.T) {
	t.Parallel()
	p := hourglass.Policy{
		DefaultTimeout: 20 * time.Minute,
		Categories:     map[string]time.Duration{"virtual": 5 * time.Minute, "physical": 30 * time.Minute},
	}
	tests := []struct {
		name       string
		policy     hourglass.Policy
		categories []string
		want       time.Duration
	}{
		{"one category", p, []string{"physical"}, 30 * time.Minute},
		{"smallest wins", p, []string{"physical", "virtual"}, 5 * time.Minute},
		{"unknown category uses default", p, []string{"books"}, 20 * time.Minute},
		{"mix of known and unknown", p, []string{"books", "physical"}, 30 * time.Minute},
		{"no categories", p, nil, 20 * time.Minute},
		{"zero policy", hourglass.Policy{}, []string{"x"}, hourglass.DefaultTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.policy.Timeout(tt.categories); got != tt.want {
				t.Errorf("Timeout(%v) = %s, want %s", tt.categories, got, tt.want)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		p    hourglass.Policy
		ok   bool
	}{
		{"default only", hourglass.Policy{DefaultTimeout: time.Minute}, true},
		{"bounds", hourglass.Policy{DefaultTimeout: time.Second, Categories: map[string]time.Duration{"a": 7 * 24 * time.Hour}}, true},
		{"zero default", hourglass.Policy{}, false},
		{"under a second", hourglass.Policy{DefaultTimeout: 999 * time.Millisecond}, false},
		{"over 7 days", hourglass.Policy{DefaultTimeout: time.Minute, Categories: map[string]time.Duration{"a": 7*24*time.Hour + time.Millisecond}}, false},
		{"empty category name", hourglass.Policy{DefaultTimeout: time.Minute, Categories: map[string]time.Duration{"": time.Minute}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.p.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
