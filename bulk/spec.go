// Package bulk runs filtered bulk actions (hourglass.BulkStore): a node's
// Runner claims a running action whose lease expired, pages through the
// items its filter selects (the list filters of GET /v1/orders, /v1/timers
// and /v1/deadletters) and applies each page with its progress in one
// transaction (BulkStore.ApplyBulk), at the action's rate, until the
// filter selects no more. A node that dies mid-way leaves its lease to
// expire; another node claims the action and resumes after the last page
// that committed, so no item is done twice. A stop commits in the database
// and refuses the runner's next page.
package bulk

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
)

// Spec is what a filtered action selects and its parameters: exactly one
// filter, the one of its action's kind, and Extend for extend_orders. The
// filters' cursor and limit fields are unused. It is stored as JSON
// (BulkAction.Spec).
type Spec struct {
	Timers      *hourglass.TimerFilter      `json:"timers,omitempty"`
	Orders      *hourglass.OrderFilter      `json:"orders,omitempty"`
	DeadLetters *hourglass.DeadLetterFilter `json:"deadletters,omitempty"`
	// Extend is extend_orders' extension: its Deadline or By (ID unset).
	Extend *hourglass.ExtendOrderParams `json:"extend,omitempty"`
}

// Check reports an invalid_argument error when s does not fit action.
func (s Spec) Check(action hourglass.BulkActionKind) error {
	var ok bool
	switch action {
	case hourglass.BulkCancelTimers:
		ok = s.Timers != nil && s.Orders == nil && s.DeadLetters == nil && s.Extend == nil
	case hourglass.BulkCancelOrders:
		ok = s.Orders != nil && s.Timers == nil && s.DeadLetters == nil && s.Extend == nil
	case hourglass.BulkExtendOrders:
		ok = s.Orders != nil && s.Timers == nil && s.DeadLetters == nil && s.Extend != nil
		if ok {
			if err := s.Extend.Validate(); err != nil {
				return err
			}
			// A list by deadline pages by the deadline each extension
			// moves: an order extended would come round again.
			if !s.Orders.DeadlineFrom.IsZero() || !s.Orders.DeadlineBefore.IsZero() {
				return hourglass.Errorf(hourglass.CodeInvalidArgument, "filter: extend_orders cannot select by deadline_after or deadline_before (each extension moves the order within that range); select by status, user_id, created_after or created_before")
			}
		}
	case hourglass.BulkRetryDeadLetters, hourglass.BulkDeleteDeadLetters:
		ok = s.DeadLetters != nil && s.Timers == nil && s.Orders == nil && s.Extend == nil
	default:
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "action: must be one of %v, got %q", hourglass.BulkActionKinds(), action)
	}
	if !ok {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "filter: does not fit action %s", action)
	}
	return nil
}

// RunningKey is the key of action with s while it runs: the same action
// and filter give the same key.
func RunningKey(action hourglass.BulkActionKind, s Spec) string {
	b, _ := json.Marshal(s) // fixed field order: the same spec, the same bytes
	sum := sha256.Sum256(append([]byte(string(action)+"\n"), b...))
	return hex.EncodeToString(sum[:16])
}

// NewID returns a new action's id at now: sortable by time (13 hex digits
// of unix ms), then random, so later actions list first.
func NewID(now time.Time) string {
	var b [5]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return fmt.Sprintf("%013x%x", hourglass.UnixMilli(now), b)
}

// cursor is where a filtered action resumes: after the timer Key, or
// after the item ID whose time in the list's order is At (unix ms).
type cursor struct {
	Key string `json:"k,omitempty"`
	At  int64  `json:"t,omitempty"`
	ID  int64  `json:"i,omitempty"`
}

func (c cursor) String() string {
	b, _ := json.Marshal(c)
	return string(b)
}

func parseCursor(s string) (cursor, error) {
	var c cursor
	if s == "" {
		return c, nil
	}
	err := json.Unmarshal([]byte(s), &c)
	return c, err
}

// Lister is what the runner reads of a store: the lists a filter pages.
type Lister interface {
	ListOrders(ctx context.Context, f hourglass.OrderFilter) ([]hourglass.Order, error)
	Timers(ctx context.Context, f hourglass.TimerFilter) ([]hourglass.Timer, error)
	DeadLetters(ctx context.Context, f hourglass.DeadLetterFilter) ([]hourglass.DeadLetter, error)
	Now(ctx context.Context) (time.Time, error)
}

// page is one page of items and the cursor after its last.
type page struct {
	items []hourglass.BulkItem
	next  cursor
}

// Page reads up to n items of action with s after c.
func readPage(ctx context.Context, l Lister, action hourglass.BulkActionKind, s Spec, c cursor, n int) (page, error) {
	var p page
	switch {
	case s.Timers != nil:
		f := *s.Timers
		f.After, f.AfterID, f.AfterFireAt, f.Limit = c.Key, c.ID, hourglass.FromUnixMilli(c.At), n
		if c.ID == 0 {
			f.AfterFireAt = time.Time{}
		}
		ts, err := l.Timers(ctx, f)
		if err != nil {
			return p, err
		}
		for _, t := range ts {
			p.items = append(p.items, hourglass.BulkItem{Kind: hourglass.BulkItemCancelTimer, Key: t.Key})
			if f.ByFireAt() {
				p.next = cursor{At: hourglass.UnixMilli(t.FireAt), ID: t.ID}
			} else {
				p.next = cursor{Key: t.Key}
			}
		}
	case s.Orders != nil:
		f := *s.Orders
		now, err := l.Now(ctx)
		if err != nil {
			return p, err
		}
		f.After, f.AfterAt, f.Limit, f.Now = c.ID, hourglass.FromUnixMilli(c.At), n, now
		if c.ID == 0 {
			f.AfterAt = time.Time{}
		}
		os, err := l.ListOrders(ctx, f)
		if err != nil {
			return p, err
		}
		sort := f.Sort()
		for _, o := range os {
			it := hourglass.BulkItem{Kind: hourglass.BulkItemCancelOrder, ID: o.ID}
			if action == hourglass.BulkExtendOrders {
				it = hourglass.BulkItem{Kind: hourglass.BulkItemExtendOrder, ID: o.ID, Extend: *s.Extend}
			}
			p.items = append(p.items, it)
			p.next = cursor{ID: o.ID}
			if k := sort.SortKey(o); !k.IsZero() {
				p.next.At = hourglass.UnixMilli(k)
			}
		}
	case s.DeadLetters != nil:
		f := *s.DeadLetters
		f.After, f.AfterFailedAt, f.Limit = c.ID, hourglass.FromUnixMilli(c.At), n
		if c.ID == 0 {
			f.AfterFailedAt = time.Time{}
		}
		ds, err := l.DeadLetters(ctx, f)
		if err != nil {
			return p, err
		}
		kind := hourglass.BulkItemRetryDeadLetter
		if action == hourglass.BulkDeleteDeadLetters {
			kind = hourglass.BulkItemDeleteDeadLetter
		}
		for _, d := range ds {
			p.items = append(p.items, hourglass.BulkItem{Kind: kind, ID: d.ID})
			p.next = cursor{ID: d.ID}
			if f.ByFailedAt() {
				p.next.At = hourglass.UnixMilli(d.FailedAt)
			}
		}
	default:
		return p, hourglass.Errorf(hourglass.CodeInvalidArgument, "bulk action without a filter")
	}
	return p, nil
}

// Count returns how many items action with s selects now, counting at
// most max (then it returns max and more true). It pages as the runner
// does, so it reads what the runner would act on.
func Count(ctx context.Context, l Lister, action hourglass.BulkActionKind, s Spec, max int) (n int, more bool, err error) {
	var c cursor
	for {
		want := min(countPage, max+1-n) // one past max says whether there are more
		p, err := readPage(ctx, l, action, s, c, want)
		if err != nil {
			return 0, false, err
		}
		n += len(p.items)
		if n > max {
			return max, true, nil
		}
		if len(p.items) < want {
			return n, false, nil
		}
		c = p.next
	}
}

// countPage is how many items Count reads at once.
const countPage = 1000
