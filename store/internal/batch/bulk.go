package batch

import (
	"context"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// Bulk writes (hourglass.BulkStore.ApplyBulk): the items of a bulk action
// or of POST /v1/timers/batch run in one transaction of the dialect's,
// with the same decisions and statements as the single writes: the
// order and timer items as one batch of ops (Run), the dead letters by
// sqlq's statements, and, for a page of a filtered action, the lease
// check first and the progress last.

// CheckBulk checks items' form before a transaction begins: at most
// hourglass.MaxBulkIDs, each as its single write checks it. Errors:
// invalid_argument naming the item.
func CheckBulk(items []hourglass.BulkItem) error {
	if len(items) > hourglass.MaxBulkIDs {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "%d items: at most %d at once", len(items), hourglass.MaxBulkIDs)
	}
	for i, it := range items {
		var err error
		switch it.Kind {
		case hourglass.BulkItemArmTimer:
			err = it.Arm.Validate()
		case hourglass.BulkItemExtendOrder:
			err = it.Extend.Validate()
		case hourglass.BulkItemCancelTimer, hourglass.BulkItemCancelOrder, hourglass.BulkItemRetryDeadLetter, hourglass.BulkItemDeleteDeadLetter:
		default:
			err = hourglass.Errorf(hourglass.CodeInvalidArgument, "unknown kind %d", it.Kind)
		}
		if err != nil {
			return hourglass.Errorf(hourglass.CodeInvalidArgument, "item %d: %s", i, hourglass.ErrorMessage(err))
		}
	}
	return nil
}

// Bulk is one ApplyBulk's run: its ops (set by RunBulk, for the due
// feed) and results.
type Bulk struct {
	Ops     []*Op
	Results []hourglass.BulkItemResult
}

// Due tells u what the committed ops changed in what is due.
func (b *Bulk) Due(u *hourglass.DueUpdate) {
	for _, o := range b.Ops {
		if o.Res.Err == nil {
			o.Due(u)
		}
	}
}

// Committed says, after the commit, what the bulk changed: what is due to
// announce (nil: the writer announces it itself, through Due), and the
// delivery engine and the fan-out to wake when the events created
// deliveries or deferred them.
func (b *Bulk) Committed(out Outcome, announce func(hourglass.DueUpdate), deliveries, deferred func()) {
	if announce != nil {
		var u hourglass.DueUpdate
		b.Due(&u)
		if !u.Empty() {
			announce(u)
		}
	}
	if out.Deliveries > 0 {
		deliveries()
	}
	if out.Deferred {
		deferred()
	}
}

// RunBulk runs items (and p, if set) in the dialect's open transaction:
// tx for the ops, x for sqlq's statements. It sets b afresh (a transaction
// may run again). Refusals are the items' results; an error means the
// transaction must roll back: bulk_lease_lost (raised before anything is
// written) or the database's.
func RunBulk(ctx context.Context, cfg Config, tx Tx, sq *sqlq.Store, x sqlq.Querier, items []hourglass.BulkItem, p *hourglass.BulkProgress, b *Bulk) (Outcome, error) {
	*b = Bulk{Results: make([]hourglass.BulkItemResult, len(items))}
	if p != nil {
		if err := sq.CheckBulkLeaseIn(ctx, x, p); err != nil {
			return Outcome{}, err
		}
	}
	var (
		of  []int // the item of each op
		out Outcome
	)
	for i, it := range items {
		var o *Op
		switch it.Kind {
		case hourglass.BulkItemArmTimer:
			o = &Op{Kind: Arm, Arm: it.Arm}
		case hourglass.BulkItemCancelTimer:
			o = &Op{Kind: Cancel, Key: it.Key}
		case hourglass.BulkItemCancelOrder:
			o = &Op{Kind: Transition, ID: it.ID, Action: hourglass.ActionCancel}
		case hourglass.BulkItemExtendOrder:
			ext := it.Extend
			ext.ID = it.ID
			o = &Op{Kind: Extend, ID: it.ID, Extend: ext}
		default:
			continue
		}
		b.Ops, of = append(b.Ops, o), append(of, i)
	}
	if len(b.Ops) > 0 {
		var err error
		if out, err = Run(ctx, cfg, tx, b.Ops); err != nil {
			return out, err
		}
	}
	for k, o := range b.Ops {
		r := &b.Results[of[k]]
		r.Err, r.Timer, r.Order, r.Created = o.Res.Err, o.Res.Timer, o.Res.Order, o.Res.Created
		switch o.Kind {
		case Cancel:
			r.Changed = o.Res.Changed
		case Extend:
			r.Changed = o.Res.Extended
		default:
			r.Changed = o.Res.Err == nil
		}
	}
	if err := sq.ApplyDeadLettersIn(ctx, x, items, b.Results); err != nil {
		return out, err
	}
	if p != nil {
		q := *p // p stays as given: the transaction may run again
		for _, r := range b.Results {
			switch {
			case r.Err != nil:
				q.Failed++
			case r.Changed:
				q.Done++
			}
		}
		if err := sq.WriteBulkProgressIn(ctx, x, &q); err != nil {
			return out, err
		}
	}
	return out, nil
}
