package hourglass

import (
	"context"
	"time"
)

// Bulk actions act on many orders, timers or dead letters at once: a list
// of up to MaxBulkIDs items applied in one transaction (BulkStore.ApplyBulk
// without progress), or every item a list filter selects, run in the
// background by one node at a time (package bulk) from a bulk_actions row
// that records the filter, the lease of the node running it and its
// progress. Each page of items and the progress past it are written in one
// transaction, so a node that takes the action over after another's death
// resumes where the last committed page ended and no item is done twice.

// BulkActionKind is what a bulk action does to each item.
type BulkActionKind string

// The bulk actions.
const (
	BulkCancelTimers      BulkActionKind = "cancel_timers"
	BulkRetryDeadLetters  BulkActionKind = "retry_deadletters"
	BulkDeleteDeadLetters BulkActionKind = "delete_deadletters"
	BulkCancelOrders      BulkActionKind = "cancel_orders"
	BulkExtendOrders      BulkActionKind = "extend_orders"
)

// BulkActionKinds lists every bulk action, for messages.
func BulkActionKinds() []BulkActionKind {
	return []BulkActionKind{BulkCancelTimers, BulkRetryDeadLetters, BulkDeleteDeadLetters, BulkCancelOrders, BulkExtendOrders}
}

// Valid reports whether k is one of the bulk actions.
func (k BulkActionKind) Valid() bool {
	for _, v := range BulkActionKinds() {
		if k == v {
			return true
		}
	}
	return false
}

// BulkState is the state of a filtered bulk action.
type BulkState string

// Bulk action states. A created action is running until its runner found
// no more items (done), a stop committed (stopped: POST
// /v1/bulk-actions/{id}/stop), or its runner met an error it cannot get
// past (failed, with BulkAction.Error).
const (
	BulkRunning BulkState = "running"
	BulkDone    BulkState = "done"
	BulkStopped BulkState = "stopped"
	BulkFailed  BulkState = "failed"
)

// Limits of bulk actions.
const (
	// MaxBulkIDs is the most ids a bulk action by ids, and the most items
	// a POST /v1/timers/batch, may name.
	MaxBulkIDs = 1000
	// MaxBulkReason is the most bytes of a bulk action's reason.
	MaxBulkReason = 500
	// MaxBulkRate is the highest rate (items per second) a filtered
	// action may ask for.
	MaxBulkRate = 100000
	// MaxBulkRunning is how many filtered bulk actions may run at once;
	// one more is refused with too_many_bulk_actions.
	MaxBulkRunning = 10
)

// CodeTooManyBulkActions: MaxBulkRunning filtered bulk actions run
// already (HTTP 429).
const CodeTooManyBulkActions Code = "too_many_bulk_actions"

// CodeBulkLeaseLost: the node writing a bulk action's progress no longer
// runs it (another took it over, or it stopped): nothing was written.
const CodeBulkLeaseLost Code = "bulk_lease_lost"

// BulkAction is a filtered bulk action as stored.
type BulkAction struct {
	// ID is a sortable text id: later actions have greater ids.
	ID     string
	Action BulkActionKind
	Reason string
	// Spec is the action's filter and parameters as the API validated
	// them (JSON, opaque to stores).
	Spec []byte
	// RunningKey identifies the action and its spec while it runs: a
	// second action with the same key returns the running one. Stores
	// clear it when the action finishes.
	RunningKey string
	// Rate is the most items a second (0: no bound).
	Rate  int
	State BulkState
	// Matched counts the items the filter selected, Done those the action
	// changed, Failed those it could not (e.g. a timer that fired).
	Matched, Done, Failed int64
	// Cursor is where the runner resumes (opaque to stores).
	Cursor string
	// Owner is the runner holding the lease until LeaseUntil ("" for none).
	Owner      string
	LeaseUntil time.Time
	// Error says why a failed action failed.
	Error      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time // zero while running
}

// BulkItemKind is what one item of ApplyBulk does.
type BulkItemKind int

// Bulk item kinds.
const (
	BulkItemArmTimer BulkItemKind = iota + 1
	BulkItemCancelTimer
	BulkItemCancelOrder
	BulkItemExtendOrder
	BulkItemRetryDeadLetter
	BulkItemDeleteDeadLetter
)

// BulkItem is one write of ApplyBulk: Arm for an arm, Key for a timer's
// cancel, ID for an order's cancel or a dead letter, Extend for an
// extension.
type BulkItem struct {
	Kind   BulkItemKind
	Arm    ArmTimerParams
	Key    string
	ID     int64
	Extend ExtendOrderParams
}

// BulkItemResult is what one item's write answered: Err is its refusal
// (not_found, timer_fired, invalid_transition, …), else the timer, order,
// or dead letter (a deletion) it left. Changed is false for a write that
// found its item in the end state already (a cancelled timer): it wrote
// nothing.
type BulkItemResult struct {
	Timer      Timer
	Created    bool
	Order      Order
	DeadLetter DeadLetter
	// Retried is a retried dead letter's delivery, due at its At.
	Retried DeliveryTimer
	Changed bool
	Err     error
}

// BulkProgress is what a runner writes with a page of items: the new
// cursor, the counts to add, and, when Finish is set, the end state.
type BulkProgress struct {
	ID    string
	Owner string
	// Lease is how long the owner's lease runs from now.
	Lease  time.Duration
	Cursor string
	// Matched, Done and Failed are added to the action's counts; the
	// store adds to Done the items of the page that changed something and
	// to Failed those refused.
	Matched, Done, Failed int64
	Finish                BulkState // "" while it runs on
	Error                 string
}

// BulkStore keeps bulk actions and applies their items. Methods are safe
// for concurrent use; "now" is the database's clock (see Store).
type BulkStore interface {
	// ApplyBulk writes items in one transaction, in order, each refused
	// alone (its result's Err) as the single write would be (TransitionOrder
	// with a cancel, ExtendOrder, ArmTimer, CancelTimer, RetryDeadLetter,
	// DeleteDeadLetter): each writes its usual events and announces what it
	// changes in what is due. With p set, the transaction first checks that
	// p.Owner runs the action p.ID (running, owned by it; else
	// bulk_lease_lost and nothing is written) and then writes p. Errors:
	// invalid_argument (more than MaxBulkIDs items, an item's form),
	// bulk_lease_lost, unavailable.
	ApplyBulk(ctx context.Context, items []BulkItem, p *BulkProgress) ([]BulkItemResult, error)
	// CreateBulkAction inserts a running action (a.ID, a.Action, a.Reason,
	// a.Spec, a.RunningKey, a.Rate; the store sets the rest) unless one with
	// the same RunningKey runs: then it returns that one, created false.
	// Errors: too_many_bulk_actions (MaxBulkRunning run), unavailable.
	CreateBulkAction(ctx context.Context, a BulkAction) (BulkAction, bool, error)
	// BulkAction returns an action. Errors: not_found.
	BulkAction(ctx context.Context, id string) (BulkAction, error)
	// BulkActions returns up to limit actions, newest first, with ids below
	// before ("" for the newest).
	BulkActions(ctx context.Context, before string, limit int) ([]BulkAction, error)
	// ClaimBulkAction gives owner the lease, for lease, of the oldest
	// running action whose lease expired (or that has none); ok false when
	// there is none.
	ClaimBulkAction(ctx context.Context, owner string, lease time.Duration) (a BulkAction, ok bool, err error)
	// StopBulkAction moves a running action to stopped: from its commit on,
	// its runner's ApplyBulk is refused (bulk_lease_lost). A finished action
	// is returned as it is. Errors: not_found.
	StopBulkAction(ctx context.Context, id string) (BulkAction, error)
	// ReleaseBulkAction gives up owner's lease of a running action (a node
	// shutting down), so another node claims it at once; nothing when
	// owner does not hold it.
	ReleaseBulkAction(ctx context.Context, id, owner string) error
	// PruneBulkActions deletes up to limit actions that finished before
	// before, and returns how many.
	PruneBulkActions(ctx context.Context, before time.Time, limit int) (int, error)
}
