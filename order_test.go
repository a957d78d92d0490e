package hourglass_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

func TestOrderPayableAndView(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		status     hourglass.State
		now        time.Time
		payable    bool
		viewStatus hourglass.State
	}{
		{"pending well before", hourglass.StatePendingPayment, deadline.Add(-time.Minute), true, hourglass.StatePendingPayment},
		{"pending 1ms before", hourglass.StatePendingPayment, deadline.Add(-time.Millisecond), true, hourglass.StatePendingPayment},
		{"pending at the deadline", hourglass.StatePendingPayment, deadline, false, hourglass.StateClosed},
		{"pending 0.5ms after (same ms)", hourglass.StatePendingPayment, deadline.Add(500 * time.Microsecond), false, hourglass.StateClosed},
		{"pending after", hourglass.StatePendingPayment, deadline.Add(time.Hour), false, hourglass.StateClosed},
		{"paid after", hourglass.StatePaid, deadline.Add(time.Hour), false, hourglass.StatePaid},
		{"cancelled before", hourglass.StateCancelled, deadline.Add(-time.Hour), false, hourglass.StateCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := hourglass.Order{Status: tt.status, Deadline: deadline}
			if got := o.Payable(tt.now); got != tt.payable {
				t.Errorf("Payable = %v, want %v", got, tt.payable)
			}
			v := o.View(tt.now)
			if v.Status != tt.viewStatus {
				t.Errorf("View status = %s, want %s", v.Status, tt.viewStatus)
			}
			if tt.status == hourglass.StatePendingPayment && v.Status == hourglass.StateClosed {
				if v.CloseReason != hourglass.CloseReasonTimeout || !v.ClosedAt.IsZero() {
					t.Errorf("virtual close: reason %q closed_at %v; want timeout and unset", v.CloseReason, v.ClosedAt)
				}
			}
		})
	}
}

func TestValidateItems(t *testing.T) {
	t.Parallel()
	many := make([]hourglass.Item, 101)
	for i := range many {
		many[i] = hourglass.Item{SKU: "S" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + string(rune('A'+i/26)), Quantity: 1}
	}
	tests := []struct {
		name  string
		items []hourglass.Item
		ok    bool
	}{
		{"one", []hourglass.Item{{"A", 1}}, true},
		{"max quantity", []hourglass.Item{{"A", 10000}}, true},
		{"none", nil, false},
		{"zero quantity", []hourglass.Item{{"A", 0}}, false},
		{"too many units", []hourglass.Item{{"A", 10001}}, false},
		{"negative", []hourglass.Item{{"A", -1}}, false},
		{"bad sku", []hourglass.Item{{"A B", 1}}, false},
		{"empty sku", []hourglass.Item{{"", 1}}, false},
		{"long sku", []hourglass.Item{{strings.Repeat("a", 65), 1}}, false},
		{"64-char sku", []hourglass.Item{{strings.Repeat("a", 64), 1}}, true},
		{"duplicate sku", []hourglass.Item{{"A", 1}, {"A", 2}}, false},
		{"101 items", many, false},
		{"100 items", many[:100], true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := hourglass.ValidateItems(tt.items)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateItems = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, &hourglass.Error{Code: hourglass.CodeInvalidArgument}) {
				t.Errorf("error %v is not invalid_argument", err)
			}
		})
	}
}

func TestValidateSKU(t *testing.T) {
	t.Parallel()
	for sku, ok := range map[string]bool{
		"SKU-1": true, "a.b_c-D9": true, "": false, "é": false, "a/b": false, "a b": false,
		strings.Repeat("z", 64): true, strings.Repeat("z", 65): false, "..": true,
	} {
		if err := hourglass.ValidateSKU(sku); (err == nil) != ok {
			t.Errorf("ValidateSKU(%q) = %v, want ok=%v", sku, err, ok)
		}
	}
}

// TestErrorCodeOfNil: no error has no code (a caller's switch reads ""
// as success), not internal.
func TestErrorCodeOfNil(t *testing.T) {
	t.Parallel()
	if got := hourglass.ErrorCode(nil); got != "" {
		t.Errorf("ErrorCode(nil) = %q, want \"\"", got)
	}
	if got := hourglass.ErrorCode(errors.New("x")); got != hourglass.CodeInternal {
		t.Errorf("ErrorCode(other) = %q, want internal", got)
	}
}
