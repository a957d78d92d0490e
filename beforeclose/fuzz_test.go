package beforeclose_test

import (
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/beforeclose"
)

// FuzzParseAnswer: any body either parses into one of the three answers,
// each with what it needs (a valid payment_id, a deadline), or is an
// error; nothing panics.
func FuzzParseAnswer(f *testing.F) {
	for _, seed := range []string{
		`{"action":"close"}`, `{"action":"paid","payment_id":"p"}`, `{"action":"extend","deadline":"2026-11-21T10:00:00Z"}`,
		`{"action":"paid","payment_id":""}`, `{"action":"extend","deadline":"x"}`, `[]`, `{"action":null}`, `{"action":"close"}x`,
		`{"action":"close","x":[[[[[[[[[[]]]]]]]]]]}`, "{\"action\":\"paid\",\"payment_id\":\"a\\u0000b\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := beforeclose.ParseAnswer(raw)
		if err != nil {
			if a != (beforeclose.Answer{}) {
				t.Fatalf("ParseAnswer(%q) = %+v with error %v", raw, a, err)
			}
			return
		}
		switch a.Action {
		case beforeclose.ActionClose:
		case beforeclose.ActionPaid:
			if hourglass.ValidatePaymentID(a.PaymentID) != nil {
				t.Fatalf("ParseAnswer(%q) = paid with an invalid payment_id %q", raw, a.PaymentID)
			}
		case beforeclose.ActionExtend:
			if a.Deadline.IsZero() {
				t.Fatalf("ParseAnswer(%q) = extend without a deadline", raw)
			}
		default:
			t.Fatalf("ParseAnswer(%q) = action %q", raw, a.Action)
		}
	})
}
