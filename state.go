package hourglass

import "fmt"

// State is the status of an order. The allowed transitions are data: see
// transitions and State.CanTransitionTo.
type State string

const (
	// StatePendingPayment is the state of a new order, whose stock is
	// reserved. The user moves it to paid (pay) or cancelled (cancel); the
	// engine moves it to closed when its deadline passes.
	StatePendingPayment State = "pending_payment"
	// StatePaid means payment was accepted before the deadline; the reserved
	// stock became sold. The merchant moves it to shipped.
	StatePaid State = "paid"
	// StateShipped means the goods left; the merchant moves it to completed.
	StateShipped State = "shipped"
	// StateCompleted is final.
	StateCompleted State = "completed"
	// StateCancelled is final: the user cancelled before paying and the
	// reserved stock was released.
	StateCancelled State = "cancelled"
	// StateClosed is final: the deadline passed without payment and the
	// reserved stock was released. Close reason is CloseReasonTimeout.
	StateClosed State = "closed"
)

// CloseReasonTimeout is the close reason of an order closed by its deadline.
const CloseReasonTimeout = "timeout"

// transitions is the state machine: for each state, the states it may move to.
var transitions = map[State][]State{
	StatePendingPayment: {StatePaid, StateCancelled, StateClosed},
	StatePaid:           {StateShipped},
	StateShipped:        {StateCompleted},
	StateCompleted:      nil,
	StateCancelled:      nil,
	StateClosed:         nil,
}

// States lists every state, in lifecycle order.
func States() []State {
	return []State{StatePendingPayment, StatePaid, StateShipped, StateCompleted, StateCancelled, StateClosed}
}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok
}

// CanTransitionTo reports whether the state machine allows s → next.
func (s State) CanTransitionTo(next State) bool {
	for _, t := range transitions[s] {
		if t == next {
			return true
		}
	}
	return false
}

// Final reports whether no transition leaves s.
func (s State) Final() bool { return s.Valid() && len(transitions[s]) == 0 }

// ParseState returns the State named s, or an invalid_argument error.
func ParseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", Errorf(CodeInvalidArgument, "unknown status %q (want one of %v)", s, States())
	}
	return st, nil
}

// Action is a user- or merchant-initiated transition that needs no payload.
type Action string

// The actions exposed by the API, each mapping to exactly one transition.
const (
	ActionCancel   Action = "cancel"
	ActionShip     Action = "ship"
	ActionComplete Action = "complete"
)

// Transition returns the (from, to) pair of an action.
func (a Action) Transition() (from, to State, err error) {
	switch a {
	case ActionCancel:
		return StatePendingPayment, StateCancelled, nil
	case ActionShip:
		return StatePaid, StateShipped, nil
	case ActionComplete:
		return StateShipped, StateCompleted, nil
	}
	return "", "", fmt.Errorf("hourglass: unknown action %q", string(a))
}
