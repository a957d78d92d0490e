// Package batch is the one algorithm of a group-committed write: the
// writes a writer goroutine took from its queue (store/internal/writer) run
// as one transaction, in these steps, whatever the database:
//
//  1. read the idempotency keys the batch's creates carry (a key another
//     process commits meanwhile makes its insert in step 6 fail with a
//     duplicate key, and the batch runs again and finds it);
//  2. lock the orders the batch pays, cancels, ships, completes, extends or
//     closes, by id;
//  3. lock the products those pending orders and the creates touch, by
//     SKU; then the timers the batch arms or cancels, by key, and those it
//     fires, by id; and read which webhooks the arms name. Every batch of
//     every process locks orders by id, then products by SKU, then timers,
//     so batches cannot deadlock on these rows;
//  4. read now (after the locks are held), the policy and whether any
//     webhook subscription exists;
//  5. decide every write in queue order on the locked rows, in memory, by
//     the planner (store/internal/plan): a hot SKU's stock is checked and
//     moved for each of the batch's orders, the same timer key twice
//     behaves as two calls one after the other, and a refused write
//     (insufficient stock, not payable, …) writes nothing and fails alone;
//  6. write each changed row once: the new orders, the changed orders and
//     products, the timers, the events and their deliveries (or, in a burst
//     of closes, one deferred fan-out row), the delivery attempts, the
//     outbox, the idempotency keys and last the announcement of what became
//     due to the other processes.
//
// A database supplies only Tx: one method per statement (lock these
// orders, insert these events, …), as river's driver and temporal's
// sqlplugin keep their logic above a thin driver. The transaction itself
// (begin, commit, what an error means) stays the dialect's, so a dialect
// may run Run inside a transaction of its own (timer requests).
//
// Run is not safe for concurrent use with the same Tx; Ops are owned by
// one batch at a time (the writer's contract).
package batch

import (
	"context"
	"slices"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/plan"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/hourglass/hourglass/store/internal/writer"
)

// Kind is what an Op does.
type Kind int

const (
	Create     Kind = iota // CreateOrder
	Pay                    // PayOrder, PayDueOrder (Late)
	Transition             // TransitionOrder
	Close                  // CloseOrders
	Extend                 // ExtendOrder
	Arm                    // ArmTimer
	Cancel                 // CancelTimer
	Fire                   // FireTimers
	Attempt                // RecordAttempt: a webhook delivery attempt's outcome
	Remind                 // RemindOrders (reminders.go)
)

// Op is one write waiting for a writer; Res is its answer once its Submit
// returned.
type Op struct {
	Kind      Kind
	Create    hourglass.CreateOrderParams // Create
	Items     string                      // Create: the items as stored (stored.EncodeItems)
	EventID   string                      // Create: its order.created's id, made by the caller, off the writer
	ID        int64                       // Pay, Transition, Extend
	PaymentID string                      // Pay
	Late      bool                        // Pay: PayDueOrder (no deadline check)
	Extend    hourglass.ExtendOrderParams // Extend
	Action    hourglass.Action            // Transition
	IDs       []int64                     // Close, Remind (order ids); Fire (timer ids, ascending, distinct)
	Arm       hourglass.ArmTimerParams    // Arm
	Key       string                      // Cancel
	Attempt   hourglass.AttemptResult     // Attempt
	By        hourglass.Closer            // Close, Fire: the provenance its events record
	Res       Result
}

// Result is an Op's answer.
type Result struct {
	Order    hourglass.Order
	Created  bool  // Create: a new order; Arm: a new timer
	Extended bool  // Extend: the deadline moved (not a repeat)
	Changed  bool  // Cancel: the timer was scheduled (not a repeat)
	Replay   int64 // an idempotent replay: the answer is the stored order with this id
	Closed   []hourglass.ClosedOrder
	Timer    hourglass.Timer         // Arm, Cancel
	Fired    []hourglass.FiredTimer  // Fire
	Record   hourglass.AttemptRecord // Attempt
	Err      error

	Reminded []hourglass.RemindedOrder // Remind
}

// Fail implements writer.Write.
func (o *Op) Fail(err error) { o.Res = Result{Err: err} }

// Err implements writer.Write.
func (o *Op) Err() error { return o.Res.Err }

// Lane is where o waits: closes and fires urgent (their lateness is what
// hourglass is measured by), attempts low (only into room closes and API
// writes leave), the rest normal (reminders too: a burst of them must not
// make the closes due beside them late).
func (o *Op) Lane() writer.Lane {
	switch o.Kind {
	case Close, Fire:
		return writer.Urgent
	case Attempt:
		return writer.Low
	}
	return writer.Normal
}

// Due implements writer.Announcer: what a committed create, pay, cancel,
// extension, arm or timer cancel changed in what is due. An idempotent
// replay changes nothing.
func (o *Op) Due(u *hourglass.DueUpdate) {
	r := &o.Res
	reminderDue(o, u)
	switch o.Kind {
	case Create:
		if r.Created && r.Replay == 0 {
			u.Due = append(u.Due, hourglass.DueItem{ID: r.Order.ID, At: r.Order.Deadline})
		}
	case Pay:
		u.Gone = append(u.Gone, o.ID)
	case Extend:
		if r.Extended {
			u.Due = append(u.Due, hourglass.DueItem{ID: r.Order.ID, At: r.Order.Deadline})
		}
	case Transition:
		if o.Action == hourglass.ActionCancel {
			u.Gone = append(u.Gone, o.ID)
		}
	case Arm:
		if r.Timer.Status == hourglass.TimerScheduled {
			u.Due = append(u.Due, hourglass.DueItem{ID: r.Timer.ID, At: r.Timer.FireAt})
		}
	case Cancel:
		u.Gone = append(u.Gone, r.Timer.ID)
	}
}

// closes returns how many orders ops close.
func closes(ops []*Op) int {
	n := 0
	for _, o := range ops {
		if o.Kind == Close {
			n += len(o.IDs)
		}
	}
	return n
}

// Snapshot is what a batch reads once its locks are held (step 4).
type Snapshot struct {
	// Now is the batch's now, at millisecond precision.
	Now time.Time
	// Policy returns the timeout policy; called at most once, by the first
	// create without a timeout.
	Policy func() (hourglass.Policy, error)
	// Subscribed reports whether any webhook subscription exists (else the
	// batch fans nothing out to subscriptions).
	Subscribed bool
}

// NewOrder is an order a batch inserts.
type NewOrder struct {
	Order hourglass.Order // ID 0 until inserted
	Items string          // as stored
	Key   string          // idempotency key, if any
	Hash  []byte          // request hash
}

// Timer is a timer row a batch locked, or one it creates, changed in
// memory.
type Timer struct {
	T    hourglass.Timer // ID 0 until a created timer is inserted
	Hash []byte          // request_hash, never nil once armed
	// Exists: the row was there when locked; otherwise the batch inserts it.
	Exists bool
	// armed: armed by the batch, so written whole, and announced if it is
	// still scheduled at the end of the batch.
	armed bool
	dirty bool
}

// Event is an event a batch writes. Run sets ID and Subject before
// InsertEvents; the driver sets Seq.
type Event struct {
	ID      string
	Type    hourglass.EventType
	Subject int64  // the order's or the timer's id
	Body    []byte // a timer.fired's or order.extended's snapshot, an order.expiring's stored.ReminderBody, else nil
	// WebhookID is the one webhook a timer's event goes to (0: to the
	// subscribed ones).
	WebhookID int64
	Seq       int64
	// By is an order.closed's or timer.fired's provenance (zero: none).
	By hourglass.Closer

	newIdx int // of a created order: index into the batch's news, else -1
}

// Delivery is a pending webhook delivery an attempt names, locked by the
// batch and changed in memory.
type Delivery struct {
	ID        int64
	Attempts  int
	NextAt    time.Time
	LastError string
	Dead      bool // a dead letter now (written with failed_at now)
	gone      bool // delivered: deleted
	touched   bool
}

// Stream is a (webhook, order) delivery stream: its deliveries go out in
// event order.
type Stream struct{ Webhook, Order int64 }

// IdempotencyKey is a key a batch stores with its created order.
type IdempotencyKey struct {
	Key     string
	Hash    []byte
	OrderID int64
}

// Tx is one transaction of a database, as a batch needs it: one statement
// per method, each given its rows in the order the method names (the lock
// order). Errors name the statement ("lock orders: …"); a retry or a
// bisection runs the batch again on a new Tx.
type Tx interface {
	// StoredKeys reads the stored idempotency keys among keys.
	StoredKeys(ctx context.Context, keys []string) (map[string]plan.StoredKey, error)
	// LockOrders locks the orders of ids (ascending, distinct) and returns
	// those that exist.
	LockOrders(ctx context.Context, ids []int64) ([]hourglass.Order, error)
	// LockProducts locks the products of skus (byte order, distinct).
	LockProducts(ctx context.Context, skus []string) (plan.Stock, error)
	// LockTimerKeys locks the timers of keys (byte order, distinct).
	LockTimerKeys(ctx context.Context, keys []string) ([]*Timer, error)
	// LockTimerIDs locks the still scheduled timers of ids (ascending,
	// distinct).
	LockTimerIDs(ctx context.Context, ids []int64) ([]*Timer, error)
	// Webhooks returns which of ids (distinct) name webhooks, without a lock.
	Webhooks(ctx context.Context, ids []int64) (map[int64]bool, error)
	// Snapshot reads now, the policy and whether subscriptions exist.
	Snapshot(ctx context.Context) (Snapshot, error)

	// InsertOrders inserts orders and sets their IDs.
	InsertOrders(ctx context.Context, orders []NewOrder, now time.Time) error
	// UpdateOrders writes the status, paid_at, closed_at, close_reason and
	// payment_id of orders (locked, ascending by id).
	UpdateOrders(ctx context.Context, orders []*hourglass.Order) error
	// ExtendOrder writes an order's new deadline.
	ExtendOrder(ctx context.Context, id int64, deadline time.Time) error
	// SetRemindAt writes the remind_at of orders ids (locked, ascending):
	// at, or NULL when at is zero (sent, skipped or none).
	SetRemindAt(ctx context.Context, at time.Time, ids []int64) error
	// UpdateProducts writes the stock of the products the batch changed
	// (stock.Changed()).
	UpdateProducts(ctx context.Context, stock plan.Stock) error
	// InsertTimers inserts created timers (in key order) and sets their IDs.
	InsertTimers(ctx context.Context, timers []*Timer) error
	// RearmTimers writes re-armed timers whole.
	RearmTimers(ctx context.Context, timers []*Timer) error
	// SetTimers moves timers ids (ascending) to status (fired or
	// cancelled) at now.
	SetTimers(ctx context.Context, status hourglass.TimerStatus, ids []int64, now time.Time) error
	// InsertEvents inserts events at now and sets their Seqs, or (a Tx
	// that sends its writes with the commit) keeps them for the statement
	// that also runs DeferFanOut's, InsertDeliveries' and FanOut's.
	InsertEvents(ctx context.Context, events []*Event, now time.Time) error
	// DeferFanOut records events (inserted) whose deliveries the fan-out
	// loop creates later (store/internal/fanout).
	DeferFanOut(ctx context.Context, events []*Event) error
	// LockWebhooks share-locks the webhooks of ids (ascending, distinct)
	// and returns those that exist: a concurrent DeleteWebhook waits for
	// this commit and then deletes the deliveries made to them.
	LockWebhooks(ctx context.Context, ids []int64) (map[int64]bool, error)
	// InsertDeliveries inserts one pending delivery due at now of each
	// event to its WebhookID.
	InsertDeliveries(ctx context.Context, events []*Event, now time.Time) error
	// FanOut inserts the deliveries due at now of events (inserted) to
	// the webhooks subscribed to them now (share-locking the subscriptions)
	// and returns how many (0 from a Tx that sends it with the commit and
	// counts them in its Outcome itself).
	FanOut(ctx context.Context, events []*Event, now time.Time) (int, error)
	// LockDeliveries locks the pending deliveries of ids (ascending,
	// distinct).
	LockDeliveries(ctx context.Context, ids []int64) ([]*Delivery, error)
	// UpdateDelivery writes a retried or dead delivery (dead at now).
	UpdateDelivery(ctx context.Context, d *Delivery, now time.Time) error
	// DeleteDeliveries deletes delivered deliveries.
	DeleteDeliveries(ctx context.Context, ids []int64) error
	// InsertAttempts appends recorded attempts to the attempt log
	// (hourglass.AttemptLog), in the order given.
	InsertAttempts(ctx context.Context, attempts []hourglass.DeliveryAttempt) error
	// StreamHeads returns the earliest pending delivery of each of streams.
	StreamHeads(ctx context.Context, streams []Stream) (map[Stream]hourglass.DeliveryTimer, error)
	// InsertOutbox writes (or moves) the outbox timers of due.
	InsertOutbox(ctx context.Context, due []hourglass.DueItem) error
	// InsertKeys stores idempotency keys at now.
	InsertKeys(ctx context.Context, keys []IdempotencyKey, now time.Time) error
	// Announce tells the other processes what became due (the order feed).
	Announce(ctx context.Context, now time.Time, due []hourglass.DueItem) error
}

// Config is what a batch needs of its store besides the Tx.
type Config struct {
	// Outbox: write the outbox timers of what becomes due.
	Outbox bool
	// DeferFanOut reports whether a batch closing this many orders leaves
	// its order.closed deliveries to the fan-out loop (fanout.Burst); nil:
	// never.
	DeferFanOut func(closes int) bool
}

// Outcome is what Run did besides answering its ops.
type Outcome struct {
	// Deliveries is how many webhook deliveries the batch created.
	Deliveries int
	// Deferred: the batch left deliveries to the fan-out loop.
	Deferred bool
	// Fanned is how many orders the batch closed or sent a reminder of:
	// each such event fans out to every subscription, so a store weighs
	// a close batch by Deliveries per Fanned order (SQLite's urgent
	// budget).
	Fanned int
}

// batch is one attempt of a batch's transaction: what it locked and read,
// what it decided and writes.
type batch struct {
	cfg Config
	tx  Tx
	ops []*Op
	res []Result

	keys       []string
	orderIDs   []int64 // the orders paid, transitioned or closed, ascending once locked
	timerKeys  []string
	timerIDs   []int64
	webhookIDs []int64 // named by arms

	stored map[string]plan.StoredKey
	orders map[int64]*locked
	stock  plan.Stock
	timers timers
	snap   Snapshot
	now    time.Time

	extended []*locked // orders whose deadline the batch moved, in decision order
	news     []NewOrder
	newOf    []int    // index into news of a create's order, else -1
	sameAs   []int    // a create answered by an earlier create of the batch (its news index), else -1
	timerOf  []*Timer // the timer an arm's or cancel's result names
	events   []*Event

	reminders
}

// locked is an order row locked by the batch, changed in memory.
type locked struct {
	o     hourglass.Order
	dirty bool
}

// Run runs ops' steps on tx and, once every statement succeeded, sets each
// op's Res. It neither begins nor commits: an error means the caller rolls
// back, and the ops' answers are set only on success (each must be set
// afresh on a retry).
func Run(ctx context.Context, cfg Config, tx Tx, ops []*Op) (Outcome, error) {
	b := &batch{cfg: cfg, tx: tx, ops: ops, res: make([]Result, len(ops))}
	b.collect()
	if err := b.lock(ctx); err != nil {
		return Outcome{}, err
	}
	if err := b.decide(); err != nil {
		return Outcome{}, err
	}
	out, err := b.write(ctx)
	if err != nil {
		return Outcome{}, err
	}
	b.answer()
	for i, o := range ops {
		o.Res = b.res[i]
	}
	out.Fanned = fanned(ops)
	return out, nil
}

// fanned returns how many orders ops closed or sent a reminder of
// (Outcome.Fanned).
func fanned(ops []*Op) int {
	n := 0
	for _, o := range ops {
		n += len(o.Res.Closed)
		for _, r := range o.Res.Reminded {
			if !r.Skipped {
				n++
			}
		}
	}
	return n
}

// collect lists the rows the batch's ops name.
func (b *batch) collect() {
	for _, o := range b.ops {
		switch o.Kind {
		case Create:
			if o.Create.IdempotencyKey != "" {
				b.keys = append(b.keys, o.Create.IdempotencyKey)
			}
		case Pay, Transition, Extend:
			b.orderIDs = append(b.orderIDs, o.ID)
		case Close:
			b.orderIDs = append(b.orderIDs, o.IDs...)
		case Remind:
			b.orderIDs = append(b.orderIDs, o.IDs...)
			b.remindOnly = true
		case Arm:
			b.timerKeys = append(b.timerKeys, o.Arm.Key)
			if o.Arm.WebhookID != 0 {
				b.webhookIDs = append(b.webhookIDs, o.Arm.WebhookID)
			}
		case Cancel:
			b.timerKeys = append(b.timerKeys, o.Key)
		case Fire:
			b.timerIDs = append(b.timerIDs, o.IDs...)
		}
	}
}

// lock runs steps 1 to 4.
func (b *batch) lock(ctx context.Context) (err error) {
	b.stored = map[string]plan.StoredKey{}
	if len(b.keys) > 0 {
		if b.stored, err = b.tx.StoredKeys(ctx, b.keys); err != nil {
			return err
		}
	}
	b.orders = map[int64]*locked{}
	if len(b.orderIDs) > 0 {
		slices.Sort(b.orderIDs)
		b.orderIDs = slices.Compact(b.orderIDs)
		rows, err := b.tx.LockOrders(ctx, b.orderIDs)
		if err != nil {
			return err
		}
		for _, o := range rows {
			b.orders[o.ID] = &locked{o: o}
		}
	}
	// The products the creates (not their replays) and the pending locked
	// orders touch.
	var skus []string
	for _, o := range b.ops {
		if o.Kind == Create {
			if k, ok := b.stored[o.Create.IdempotencyKey]; ok && o.Create.IdempotencyKey != "" && k.OrderID != 0 {
				continue // a replay reserves nothing
			}
			for _, it := range o.Create.Items {
				skus = append(skus, it.SKU)
			}
		}
	}
	stockOf := b.stockOrders()
	for _, lo := range b.orders {
		if lo.o.Status == hourglass.StatePendingPayment && stockOf(lo.o.ID) {
			for _, it := range lo.o.Items {
				skus = append(skus, it.SKU)
			}
		}
	}
	b.stock = plan.Stock{}
	if len(skus) > 0 {
		slices.Sort(skus) // byte order: the order of the binary primary keys
		if b.stock, err = b.tx.LockProducts(ctx, slices.Compact(skus)); err != nil {
			return err
		}
	}
	if err := b.timers.lock(ctx, b.tx, b.timerKeys, b.timerIDs, b.webhookIDs); err != nil {
		return err
	}
	if b.snap, err = b.tx.Snapshot(ctx); err != nil {
		return err
	}
	b.now = b.snap.Now
	return nil
}

// decide runs step 5: each op in queue order, on the locked rows, by the
// planner.
func (b *batch) decide() error {
	b.newOf, b.sameAs, b.timerOf = make([]int, len(b.ops)), make([]int, len(b.ops)), make([]*Timer, len(b.ops))
	admit := &plan.Admission{Now: b.now, Stock: b.stock, Keys: b.stored, Policy: b.snap.Policy}
	for i, o := range b.ops {
		b.newOf[i], b.sameAs[i] = -1, -1
		r := &b.res[i]
		var err error
		switch o.Kind {
		case Create:
			err = b.create(i, admit)
		case Pay:
			lo := b.orders[o.ID]
			var pay, repeat bool
			if o.Late {
				pay, repeat, r.Err = plan.PayDue(row(lo), o.ID, o.PaymentID)
			} else {
				pay, repeat, r.Err = plan.Pay(row(lo), o.ID, o.PaymentID, b.now)
			}
			if pay {
				cur := &lo.o
				err = b.stock.Move(cur.Items, plan.Reserved, plan.Sold)
				cur.Status, cur.PaidAt, cur.PaymentID = hourglass.StatePaid, b.now, o.PaymentID
				b.changed(lo, hourglass.EventOrderPaid)
			}
			if pay || repeat {
				r.Order = clone(lo.o)
			}
		case Extend:
			lo := b.orders[o.ID]
			extend, repeat, target, err := plan.Extend(row(lo), o.Extend, b.now)
			if r.Err = err; extend {
				lo.o.Deadline = target
				b.rearm(lo)
				b.extended = append(b.extended, lo)
				// The body is the snapshot now: the deadline it set must
				// survive a later extension (hourglass.Order.AsOf).
				id := hourglass.NewEventID()
				b.events = append(b.events, &Event{ID: id, Type: hourglass.EventOrderExtended, Subject: lo.o.ID, newIdx: -1,
					Body: sqlq.RenderEvent(id, hourglass.EventOrderExtended, hourglass.UnixMilli(b.now), lo.o)})
				r.Extended = true
			}
			if extend || repeat {
				r.Order = clone(lo.o)
			}
		case Transition:
			var from, to hourglass.State
			if from, to, r.Err = plan.Action(o.Action); r.Err != nil {
				continue
			}
			lo := b.orders[o.ID]
			if r.Err = plan.Transition(row(lo), o.ID, o.Action, from, b.now); r.Err != nil {
				continue
			}
			if to == hourglass.StateCancelled {
				err = b.stock.Move(lo.o.Items, plan.Reserved, plan.Available)
			}
			lo.o.Status = to
			b.changed(lo, hourglass.EventFor(to))
			r.Order = clone(lo.o)
		case Close:
			for _, id := range o.IDs {
				lo := b.orders[id]
				if !plan.Closes(row(lo), b.now) {
					continue
				}
				cur := &lo.o
				if err = b.stock.Move(cur.Items, plan.Reserved, plan.Available); err != nil {
					break
				}
				cur.Status, cur.ClosedAt, cur.CloseReason = hourglass.StateClosed, b.now, hourglass.CloseReasonTimeout
				b.changed(lo, hourglass.EventOrderClosed)
				b.events[len(b.events)-1].By = o.By
				r.Closed = append(r.Closed, hourglass.ClosedOrder{OrderID: id, Deadline: cur.Deadline, ClosedAt: b.now})
			}
		case Remind:
			r.Reminded = b.remind(o.IDs)
		case Arm:
			b.timerOf[i], *r = b.timers.arm(o.Arm, b.now)
		case Cancel:
			b.timerOf[i], *r = b.timers.cancel(o.Key, b.now)
		case Fire:
			var evs []*Event
			r.Fired, evs, err = b.timers.fire(o.IDs, b.now)
			for _, e := range evs {
				e.By = o.By
			}
			b.events = append(b.events, evs...)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// row is a locked order's row, or nil when there is none.
func row(lo *locked) *hourglass.Order {
	if lo == nil {
		return nil
	}
	return &lo.o
}

// changed marks a locked order written, with its event.
func (b *batch) changed(lo *locked, typ hourglass.EventType) {
	lo.dirty = true
	b.events = append(b.events, &Event{Type: typ, Subject: lo.o.ID, newIdx: -1})
}

// create decides the create of op i.
func (b *batch) create(i int, admit *plan.Admission) error {
	o, r := b.ops[i], &b.res[i]
	d, err := admit.Create(o.Create)
	switch {
	case err != nil:
		return err
	case d.Err != nil:
		r.Err = d.Err
	case d.Replay != nil:
		r.Replay = d.Replay.OrderID
	case d.SameAs >= 0:
		b.sameAs[i] = d.SameAs
	default:
		b.newOf[i] = len(b.news)
		b.events = append(b.events, &Event{ID: o.EventID, Type: hourglass.EventOrderCreated, newIdx: len(b.news)})
		b.news = append(b.news, NewOrder{Order: *d.Order, Items: o.Items, Key: o.Create.IdempotencyKey, Hash: o.Create.RequestHash})
	}
	return nil
}

// write runs step 6.
func (b *batch) write(ctx context.Context) (out Outcome, err error) {
	tx := b.tx
	if len(b.news) > 0 {
		if err := tx.InsertOrders(ctx, b.news, b.now); err != nil {
			return out, err
		}
	}
	var dirty []*hourglass.Order
	for _, id := range b.orderIDs {
		if lo := b.orders[id]; lo != nil && lo.dirty {
			dirty = append(dirty, &lo.o)
		}
	}
	if len(dirty) > 0 {
		if err := tx.UpdateOrders(ctx, dirty); err != nil {
			return out, err
		}
	}
	// Extensions are rare: one statement each (UpdateOrders writes the
	// fields transitions set, which a batch of closes shares).
	for _, lo := range b.extended {
		if err := tx.ExtendOrder(ctx, lo.o.ID, lo.o.Deadline); err != nil {
			return out, err
		}
	}
	if len(b.stock.Changed()) > 0 {
		if err := tx.UpdateProducts(ctx, b.stock); err != nil {
			return out, err
		}
	}
	if err := b.writeReminders(ctx); err != nil {
		return out, err
	}
	if err := b.timers.write(ctx, tx, b.now); err != nil {
		return out, err
	}
	if out, err = b.fanOut(ctx); err != nil {
		return out, err
	}
	if err := b.attempts(ctx); err != nil {
		return out, err
	}
	// What the batch makes due: its created orders' deadlines, its armed
	// timers', its extensions'.
	due := make([]hourglass.DueItem, 0, len(b.news))
	for _, n := range b.news {
		due = append(due, hourglass.DueItem{ID: n.Order.ID, At: n.Order.Deadline})
	}
	due = append(due, b.timers.announced()...)
	for _, lo := range b.extended {
		if lo.o.Status == hourglass.StatePendingPayment { // not paid or closed later in the batch
			due = append(due, hourglass.DueItem{ID: lo.o.ID, At: lo.o.Deadline})
		}
	}
	due = b.remindersDue(due)
	if b.cfg.Outbox && len(due) > 0 {
		if err := tx.InsertOutbox(ctx, due); err != nil {
			return out, err
		}
	}
	var keys []IdempotencyKey
	for _, n := range b.news {
		if n.Key != "" {
			keys = append(keys, IdempotencyKey{Key: n.Key, Hash: n.Hash, OrderID: n.Order.ID})
		}
	}
	if len(keys) > 0 {
		// A key committed by another process since step 1 fails here with a
		// duplicate key: the batch runs again and replays it.
		if err := tx.InsertKeys(ctx, keys, b.now); err != nil {
			return out, err
		}
	}
	// Last, so that its position, handed out now, becomes visible soon
	// after.
	if len(due) > 0 {
		if err := tx.Announce(ctx, b.now, due); err != nil {
			return out, err
		}
	}
	return out, nil
}

// fanOut inserts the batch's events and their deliveries: to the webhook a
// timer's event names, if it still exists, else to the webhooks subscribed
// now. In a burst of closes the order.closed events' deliveries are left
// to the fan-out loop (one row); a close event is its order's last, so no
// later event of the order can be delivered before it.
func (b *batch) fanOut(ctx context.Context) (out Outcome, err error) {
	if len(b.events) == 0 {
		return out, nil
	}
	for _, e := range b.events {
		if e.newIdx >= 0 {
			e.Subject = b.news[e.newIdx].Order.ID
		}
		if e.ID == "" {
			e.ID = hourglass.NewEventID()
		}
	}
	if err := b.tx.InsertEvents(ctx, b.events, b.now); err != nil {
		return out, err
	}
	events := b.events
	if b.snap.Subscribed && b.cfg.DeferFanOut != nil && b.cfg.DeferFanOut(closes(b.ops)) {
		var rest, deferred []*Event
		for _, e := range events {
			if e.Type == hourglass.EventOrderClosed && e.WebhookID == 0 {
				deferred = append(deferred, e)
			} else {
				rest = append(rest, e)
			}
		}
		if len(deferred) > 0 {
			if err := b.tx.DeferFanOut(ctx, deferred); err != nil {
				return out, err
			}
			events, out.Deferred = rest, true
		}
	}
	var (
		pinnedIDs  []int64
		subscribed []*Event
	)
	for _, e := range events {
		if e.WebhookID != 0 {
			pinnedIDs = append(pinnedIDs, e.WebhookID)
		} else {
			subscribed = append(subscribed, e)
		}
	}
	// Webhook rows are locked before subscriptions, in DeleteWebhook's
	// order.
	if len(pinnedIDs) > 0 {
		slices.Sort(pinnedIDs)
		exists, err := b.tx.LockWebhooks(ctx, slices.Compact(pinnedIDs))
		if err != nil {
			return out, err
		}
		var pinned []*Event
		for _, e := range events {
			if e.WebhookID != 0 && exists[e.WebhookID] {
				pinned = append(pinned, e)
			}
		}
		if len(pinned) > 0 {
			if err := b.tx.InsertDeliveries(ctx, pinned, b.now); err != nil {
				return out, err
			}
			out.Deliveries += len(pinned)
		}
	}
	if len(subscribed) > 0 && b.snap.Subscribed {
		n, err := b.tx.FanOut(ctx, subscribed, b.now)
		if err != nil {
			return out, err
		}
		out.Deliveries += n
	}
	return out, nil
}

// answer completes the results once the batch's statements ran: the new
// orders' ids, and the timers it created.
func (b *batch) answer() {
	for i := range b.ops {
		if j := b.newOf[i]; j >= 0 {
			b.res[i].Order, b.res[i].Created = clone(b.news[j].Order), true
		}
		if j := b.sameAs[i]; j >= 0 {
			b.res[i].Order = clone(b.news[j].Order)
		}
		if t := b.timerOf[i]; t != nil && b.res[i].Timer.ID == 0 {
			b.res[i].Timer.ID = t.T.ID // created by this batch
		}
	}
}

// Seqs returns the Seqs of events.
func Seqs(events []*Event) []int64 {
	out := make([]int64, len(events))
	for i, e := range events {
		out[i] = e.Seq
	}
	return out
}

func clone(o hourglass.Order) hourglass.Order {
	o.Items = slices.Clone(o.Items)
	return o
}
