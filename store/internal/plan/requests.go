package plan

import (
	"errors"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
)

// Timer requests (hourglass.TimerRequestStore): a dialect reads and locks a
// batch of timer_requests rows and the keys to hold back, and asks
// PlanTimerRequests what each becomes; it runs the arms and cancels (all at
// once, or by Round), settles each with what its write answered
// (TimerRequest.Settle), moves the rejected ones to timer_request_errors
// with their Reason, deletes the done ones (Outcome) and commits; Result
// then says what the engine must hear. Every store thus rejects the same
// requests with the same reasons and announces the same end states.

// RequestRow is a timer_requests row as a dialect read it.
type RequestRow struct {
	hourglass.TimerRequest
	// Unreadable, when set, is why a column does not hold a value of its
	// type (a zero date, a text that is not a time): the request is
	// rejected with it as its reason.
	Unreadable string
}

// TimerRequest is one request of a batch and what it became: held back
// for a later batch, rejected with a reason, or an arm or a cancel to run.
type TimerRequest struct {
	Row hourglass.TimerRequest
	// Arm is an arm's params; nil for a cancel, and for a request held or
	// rejected before it ran.
	Arm *hourglass.ArmTimerParams
	// CancelKey is a cancel's key.
	CancelKey string
	// Round is the request's place among its key's requests that the batch
	// runs (0 for the first): a dialect that writes set by set runs round
	// 0 of every key, then round 1, so that each key's requests take
	// effect in seq order.
	Round int
	// Held requests are left for a later batch: their key has an earlier
	// request the batch does not hold.
	Held bool
	// Reason is why the request is rejected; empty if it is not.
	Reason string
	// Timer is the timer the request's write left (Settle); its ID is 0 if
	// it changed none (a cancel of a timer that fired or does not exist).
	Timer hourglass.Timer
	// Creates says the arm's key named no timer when the batch was decided
	// (Facts.Existing): it counts against Facts.Room.
	Creates bool
}

// Facts are what the dialect read in the batch's transaction for the
// checks PUT /v1/timers/{key} makes against the database.
type Facts struct {
	// Webhooks are the webhooks the batch's arms name, by id (missing: no
	// such webhook), for hourglass.CheckTimerWebhook.
	Webhooks map[int64]*hourglass.Webhook
	// Room is how many timers the batch may create (--timer-max less the
	// timers that exist; hourglass.TimerRequestsParams.Room), Max the
	// --timer-max its refusals name.
	Room, Max int64
	// Existing are the keys of the batch's arms that name a timer already;
	// nil when the dialect did not read them because Room covers every arm
	// of the batch (NeedsExisting).
	Existing map[string]bool
}

// Runs reports whether the request is written: an arm or a cancel, neither
// held nor rejected.
func (r *TimerRequest) Runs() bool { return !r.Held && r.Reason == "" }

// Settle records what the request's write answered: t, or the refusal
// err. An arm refused as invalid (a webhook that does not exist) is
// rejected with the refusal's message; a cancel of a timer that fired or
// does not exist changes nothing and counts as applied, as DELETE
// /v1/timers/{key} would leave it. Any other error is the database's and
// is returned: the dialect rolls the batch back.
func (r *TimerRequest) Settle(t hourglass.Timer, err error) error {
	if err == nil {
		r.Timer = t
		return nil
	}
	switch hourglass.ErrorCode(err) {
	case hourglass.CodeNotFound, hourglass.CodeTimerFired:
		if r.Arm == nil {
			r.Timer = hourglass.Timer{}
			return nil
		}
	case hourglass.CodeInvalidArgument:
		r.Reason = reasonOf(err)
		return nil
	}
	return err
}

// TimerRequests is a batch of timer requests, decided, in seq order.
type TimerRequests []*TimerRequest

// PlanTimerRequests decides each request of rows (in seq order) at now, as
// hourglass.TimerRequest's ArmParams and CancelKey do, with PUT's checks
// against the database's facts f: the keys in held wait; a request that is
// not a valid arm or cancel, with an Unreadable column, naming a webhook
// that does not take timer.fired (hourglass.CheckTimerWebhook), or that
// would create a timer beyond f.Room (hourglass.TimerLimitError), is
// rejected with its reason; the others run.
func PlanTimerRequests(rows []RequestRow, held map[string]bool, now time.Time, f Facts) TimerRequests {
	p := make(TimerRequests, 0, len(rows))
	perKey := map[string]int{}
	created := map[string]bool{} // the keys the batch creates
	for _, row := range rows {
		r := &TimerRequest{Row: row.TimerRequest}
		p = append(p, r)
		if row.Key != nil && held[*row.Key] {
			r.Held = true
			continue
		}
		if row.Unreadable != "" {
			r.Reason = row.Unreadable
			continue
		}
		var key string
		switch row.Action {
		case hourglass.TimerRequestArm:
			a, err := row.ArmParams(now)
			if err == nil {
				err = hourglass.CheckTimerWebhook(a.WebhookID, f.Webhooks[a.WebhookID])
			}
			if err != nil {
				r.Reason = reasonOf(err)
				continue
			}
			if f.Existing != nil && !f.Existing[a.Key] && !created[a.Key] {
				if int64(len(created)) >= f.Room {
					r.Reason = reasonOf(hourglass.TimerLimitError(f.Max))
					continue
				}
				created[a.Key], r.Creates = true, true
			}
			r.Arm, key = &a, a.Key
		case hourglass.TimerRequestCancel:
			k, err := row.CancelKey()
			if err != nil {
				r.Reason = reasonOf(err)
				continue
			}
			r.CancelKey, key = k, k
		default:
			r.Reason = fmt.Sprintf("action: must be %q or %q, got %q", hourglass.TimerRequestArm, hourglass.TimerRequestCancel, row.Action)
			continue
		}
		r.Round = perKey[key]
		perKey[key]++
	}
	return p
}

// HeldKeysToRead returns the keys whose earlier requests the dialect must
// look for: the valid keys of rows, each once. A request with any other
// key is rejected whatever came before it.
func HeldKeysToRead(rows []RequestRow) []string {
	var keys []string
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Key != nil && !seen[*r.Key] && hourglass.ValidateTimerKey(*r.Key) == nil {
			seen[*r.Key] = true
			keys = append(keys, *r.Key)
		}
	}
	return keys
}

// NeedsExisting reports whether the dialect must read which of the arms'
// keys name a timer (Facts.Existing): only when the batch could create
// more timers than room allows.
func NeedsExisting(rows []RequestRow, room int64) bool {
	n := int64(0)
	for _, r := range rows {
		if r.Action == hourglass.TimerRequestArm {
			n++
		}
	}
	return n > room
}

// ArmWebhooks returns the webhook ids the arms of rows name, each once:
// the webhooks the dialect reads for Facts.Webhooks.
func ArmWebhooks(rows []RequestRow) []int64 {
	var ids []int64
	seen := map[int64]bool{}
	for _, r := range rows {
		if r.Action == hourglass.TimerRequestArm && r.WebhookID != nil && *r.WebhookID > 0 && !seen[*r.WebhookID] {
			seen[*r.WebhookID] = true
			ids = append(ids, *r.WebhookID)
		}
	}
	return ids
}

// ArmKeys returns the valid keys the arms of rows name, each once.
func ArmKeys(rows []RequestRow) []string {
	var keys []string
	seen := map[string]bool{}
	for _, r := range rows {
		if r.Action == hourglass.TimerRequestArm && r.Key != nil && !seen[*r.Key] && hourglass.ValidateTimerKey(*r.Key) == nil {
			seen[*r.Key] = true
			keys = append(keys, *r.Key)
		}
	}
	return keys
}

// Rounds returns the number of rounds of the requests that run.
func (p TimerRequests) Rounds() int {
	n := 0
	for _, r := range p {
		if r.Runs() {
			n = max(n, r.Round+1)
		}
	}
	return n
}

// Outcome returns the seqs done (applied or rejected: to delete) and the
// rejected requests (to move to timer_request_errors).
func (p TimerRequests) Outcome() (done []int64, rejected []*TimerRequest) {
	for _, r := range p {
		if r.Held {
			continue
		}
		done = append(done, r.Row.Seq)
		if r.Reason != "" {
			rejected = append(rejected, r)
		}
	}
	return done, rejected
}

// Result returns what the batch did, once committed at committedAt: the
// counts, each request's lag from its requested_at (one whose
// requested_at is unknown counts none), and each key's end state, in the
// order the keys first appear: armed, as a due item, or cancelled, as an
// id. The engine must hear only the end states. Full is the dialect's to
// set.
func (p TimerRequests) Result(committedAt time.Time) hourglass.TimerRequestsApplied {
	var res hourglass.TimerRequestsApplied
	var keys []string
	last := map[string]*TimerRequest{}
	for _, r := range p {
		if r.Held {
			continue
		}
		if r.Reason != "" {
			res.Rejected++
		} else {
			res.Applied++
			if r.Creates && r.Timer.ID != 0 {
				res.Created++
			}
		}
		at := r.Row.RequestedAt
		if at.IsZero() {
			at = committedAt
		}
		res.Lags = append(res.Lags, max(committedAt.Sub(at), 0))
		if !r.Runs() || r.Timer.ID == 0 {
			continue
		}
		if _, ok := last[r.Timer.Key]; !ok {
			keys = append(keys, r.Timer.Key)
		}
		last[r.Timer.Key] = r
	}
	for _, k := range keys {
		if r := last[k]; r.Arm != nil {
			res.Armed = append(res.Armed, hourglass.DueItem{ID: r.Timer.ID, At: r.Timer.FireAt})
		} else {
			res.Cancelled = append(res.Cancelled, r.Timer.ID)
		}
	}
	return res
}

// reasonOf is a rejection's text: the refusal's message, without a
// package's prefix.
func reasonOf(err error) string {
	var he *hourglass.Error
	if errors.As(err, &he) {
		return he.Message
	}
	return err.Error()
}
