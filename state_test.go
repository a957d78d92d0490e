package hourglass_test

import (
	"testing"

	"github.com/hourglass/hourglass"
)

func TestStateTransitions(t *testing.T) {
	t.Parallel()
	allowed := map[[2]hourglass.State]bool{
		{hourglass.StatePendingPayment, hourglass.StatePaid}:      true,
		{hourglass.StatePendingPayment, hourglass.StateCancelled}: true,
		{hourglass.StatePendingPayment, hourglass.StateClosed}:    true,
		{hourglass.StatePaid, hourglass.StateShipped}:             true,
		{hourglass.StateShipped, hourglass.StateCompleted}:        true,
	}
	// Every (from, to) pair of states, including self-transitions: exactly
	// the five above are allowed.
	for _, from := range hourglass.States() {
		for _, to := range hourglass.States() {
			t.Run(string(from)+"->"+string(to), func(t *testing.T) {
				if got, want := from.CanTransitionTo(to), allowed[[2]hourglass.State{from, to}]; got != want {
					t.Errorf("%s.CanTransitionTo(%s) = %v, want %v", from, to, got, want)
				}
			})
		}
	}
}

func TestStateFinal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		state hourglass.State
		final bool
	}{
		{hourglass.StatePendingPayment, false},
		{hourglass.StatePaid, false},
		{hourglass.StateShipped, false},
		{hourglass.StateCompleted, true},
		{hourglass.StateCancelled, true},
		{hourglass.StateClosed, true},
		{"bogus", false},
	}
	for _, tt := range tests {
		if got := tt.state.Final(); got != tt.final {
			t.Errorf("%q.Final() = %v, want %v", tt.state, got, tt.final)
		}
	}
}

func TestActionTransition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		action   hourglass.Action
		from, to hourglass.State
		wantErr  bool
	}{
		{hourglass.ActionCancel, hourglass.StatePendingPayment, hourglass.StateCancelled, false},
		{hourglass.ActionShip, hourglass.StatePaid, hourglass.StateShipped, false},
		{hourglass.ActionComplete, hourglass.StateShipped, hourglass.StateCompleted, false},
		{"refund", "", "", true},
	}
	for _, tt := range tests {
		from, to, err := tt.action.Transition()
		if (err != nil) != tt.wantErr || from != tt.from || to != tt.to {
			t.Errorf("%s.Transition() = %s, %s, %v; want %s, %s, err=%v", tt.action, from, to, err, tt.from, tt.to, tt.wantErr)
		}
		if err == nil && !from.CanTransitionTo(to) {
			t.Errorf("action %s maps to %s->%s, which the state machine forbids", tt.action, from, to)
		}
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	for _, s := range hourglass.States() {
		if got, err := hourglass.ParseState(string(s)); err != nil || got != s {
			t.Errorf("ParseState(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := hourglass.ParseState("open"); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
		t.Errorf("ParseState(open) error = %v, want invalid_argument", err)
	}
}
