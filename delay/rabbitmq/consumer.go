package rabbitmq

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hourglass/hourglass"
)

// Run implements hourglass.Scheduler: it consumes the due queue on a
// connection of its own and delivers each timer at its deadline, until ctx
// ends (then it returns nil) or the connection, a channel or the consumer is
// lost (then it returns an error, and the broker hands every unacknowledged
// delivery to another consumer or to the next Run). It always waits for an
// in-flight Deliver before returning, and acknowledges a delivery only after
// Deliver returned nil for it (or, for a timer sent on to another tier,
// after that publish was confirmed). Several Runs, in one process or many,
// may consume the same namespace at once.
func (s *Scheduler) Run(ctx context.Context, deliver hourglass.Deliver) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if ctx.Err() != nil {
		return nil
	}
	conn, err := s.dial(ctx, "consumer")
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("rabbitmq: run: %w", err)
	}
	// Closing the connection hands unacknowledged deliveries back.
	defer conn.Close()
	c, err := s.newConsumer(conn, deliver)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		s.partsDeclared.Store(false) // perhaps the broker lost them
		return fmt.Errorf("rabbitmq: run: %w", err)
	}
	if err := c.run(ctx); err != nil {
		s.partsDeclared.Store(false)
		return err
	}
	return nil
}

// pending is a delivery the consumer has not acknowledged yet.
type pending struct {
	msg   *arrival
	timer hourglass.DueItem
}

// arrival is one message from the due queue, carrying one timer or several
// (packed). It is acknowledged once each of its timers was delivered or
// forwarded to its next tier; if a Deliver of any fails, it goes back to the
// queue whole (its timers already delivered come again: at least once) and
// its timers still in memory are dropped.
type arrival struct {
	tag    uint64
	left   int  // timers not yet delivered or forwarded
	nacked bool // handed back to the queue
}

// consumer is one Run's state; only its run goroutine touches it, except the
// deliver and republish goroutines, which get their batches by value.
type consumer struct {
	s       *Scheduler
	cfg     Config
	topo    topology
	log     *slog.Logger
	clock   hourglass.Clock
	deliver hourglass.Deliver

	ch         *amqp.Channel
	pub        *publisher
	deliveries <-chan amqp.Delivery
	// Closes of the connection and of both channels: the library sends
	// the error, if any, then closes each.
	connLost, chLost, pubLost chan *amqp.Error
	cancelled                 <-chan string // the broker cancelled the consumer
	// The owned partitions' due queues: a consumer tag for each, whose
	// deliveries a goroutine forwards to partDeliveries until stop closes.
	partTags       map[int]string
	partDeliveries chan amqp.Delivery
	stop           chan struct{}

	held   heldHeap  // waiting for their deadline, earliest first
	ready  []pending // due, waiting for a Deliver
	retier []pending // early, waiting to be published to a tier
}

func (s *Scheduler) newConsumer(conn *amqp.Connection, deliver hourglass.Deliver) (*consumer, error) {
	if err := s.declare(conn, "consumer"); err != nil {
		return nil, err
	}
	pub, err := newPublisher(conn, s.topo, s.cfg.Clock)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open consuming channel: %w", err)
	}
	if err := ch.Qos(s.cfg.Prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("set prefetch: %w", err)
	}
	connLost := conn.NotifyClose(make(chan *amqp.Error, 1))
	chLost := ch.NotifyClose(make(chan *amqp.Error, 1))
	pubLost := pub.ch.NotifyClose(make(chan *amqp.Error, 1))
	cancelled := ch.NotifyCancel(make(chan string, 1))
	deliveries, err := ch.Consume(s.topo.due, s.consumerTag(), false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume queue %q: %w", s.topo.due, err)
	}
	return &consumer{
		s: s, cfg: s.cfg, topo: s.topo, log: s.log, clock: s.cfg.Clock, deliver: deliver,
		ch: ch, pub: pub, deliveries: deliveries, cancelled: cancelled,
		connLost: connLost, chLost: chLost, pubLost: pubLost,
		partTags: map[int]string{}, partDeliveries: make(chan amqp.Delivery), stop: make(chan struct{}),
	}, nil
}

// consumerTag returns a new consumer tag. The library's default names the
// binary's path; this one says whose consumer it is.
func (s *Scheduler) consumerTag() string {
	return fmt.Sprintf("hourglass-%d-%d", os.Getpid(), s.consumers.Add(1))
}

// reown follows the partitions owned: it starts consuming the due queues
// of those gained and cancels the consumers of those lost, and sends the
// timers of lost partitions it holds (waiting for their deadline or for a
// Deliver) to their partitions' queues, for the new owner. Deliveries of a
// cancelled consumer that were already sent come through arrive, which
// sends their timers on too.
func (c *consumer) reown() error {
	mask := c.s.owned.Load()
	for p := range hourglass.Partitions {
		owned := mask>>p&1 == 1
		tag, consuming := c.partTags[p]
		switch {
		case owned && !consuming:
			tag = c.s.consumerTag()
			// No wait for the broker's consume-ok: 64 round trips
			// delayed the start; a queue that is missing closes the
			// channel, and Run returns its error.
			d, err := c.ch.Consume(c.topo.parts[p], tag, false, false, false, true, nil)
			if err != nil {
				return fmt.Errorf("rabbitmq: run: consume queue %q: %w", c.topo.parts[p], err)
			}
			c.partTags[p] = tag
			go func() {
				for m := range d {
					select {
					case c.partDeliveries <- m:
					case <-c.stop:
						return // the connection's close hands it back
					}
				}
			}()
		case !owned && consuming:
			if err := c.ch.Cancel(tag, false); err != nil {
				return fmt.Errorf("rabbitmq: run: cancel the consumer of queue %q: %w", c.topo.parts[p], err)
			}
			delete(c.partTags, p)
		}
	}
	kept := c.held[:0]
	for _, p := range c.held {
		if c.s.owns(p.timer.ID) {
			kept = append(kept, p)
		} else {
			c.retier = append(c.retier, p)
		}
	}
	clear(c.held[len(kept):])
	c.held = kept
	heap.Init(&c.held)
	c.ready = slices.DeleteFunc(c.ready, func(p pending) bool {
		if c.s.owns(p.timer.ID) {
			return false
		}
		c.retier = append(c.retier, p)
		return true
	})
	return nil
}

type batchResult struct {
	batch []pending
	err   error
}

// drainMax is the most deliveries taken off the channel in one go before the
// loop looks at its other work.
const drainMax = 1000

// run is the consumer's loop: it sorts arrivals into due, held and early,
// wakes at the earliest held deadline, and keeps at most one Deliver and one
// republish in flight; what arrives meanwhile forms the next batch.
func (c *consumer) run(ctx context.Context) (err error) {
	delivered := make(chan batchResult, 1)
	republished := make(chan batchResult, 1)
	delivering, republishing := false, false
	var backoff time.Duration
	var retryAt time.Time
	// Confirms of a republish are awaited even while Run stops, so that a
	// published timer's arrival is acked rather than sent round again.
	pubCtx := context.WithoutCancel(ctx)

	if err := c.reown(); err != nil {
		return err
	}
	defer close(c.stop)
	defer func() {
		// Never leave a Deliver running behind Run; ack what it finished.
		if delivering {
			c.delivered(ctx, <-delivered, &backoff, &retryAt)
		}
		if republishing {
			c.republished(<-republished)
		}
		if ctx.Err() != nil {
			err = nil
		}
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := c.clock.Now()
		for len(c.held) > 0 && !c.held[0].timer.At.After(now) {
			c.ready = append(c.ready, heap.Pop(&c.held).(pending))
		}
		if !delivering && len(c.ready) > 0 && !now.Before(retryAt) {
			if batch := c.take(&c.ready, c.cfg.DeliverBatch); len(batch) > 0 {
				delivering = true
				go func() { delivered <- batchResult{batch, c.deliver(ctx, timersOf(batch))} }()
			}
		}
		if !republishing && len(c.retier) > 0 {
			if batch := c.take(&c.retier, publishChunk); len(batch) > 0 {
				republishing = true
				go func() {
					pctx, cancel := context.WithTimeout(pubCtx, c.cfg.PublishTimeout)
					defer cancel()
					republished <- batchResult{batch, c.pub.publish(pctx, timersOf(batch))}
				}()
			}
		}
		wake := time.Hour
		if len(c.held) > 0 {
			wake = c.held[0].timer.At.Sub(now)
		}
		if !delivering && len(c.ready) > 0 {
			wake = min(wake, retryAt.Sub(now))
		}
		timer.Reset(max(wake, 0))

		select {
		case <-ctx.Done():
			return nil
		case e := <-c.connLost:
			return fmt.Errorf("rabbitmq: run: connection lost: %w", closeReason(e))
		case e := <-c.chLost:
			return fmt.Errorf("rabbitmq: run: consuming channel closed: %w", closeReason(e))
		case e := <-c.pubLost:
			return fmt.Errorf("rabbitmq: run: publishing channel closed: %w", closeReason(e))
		case tag := <-c.cancelled:
			return fmt.Errorf("rabbitmq: run: the broker cancelled consumer %s (queue %q deleted?)", tag, c.topo.due)
		case d, ok := <-c.deliveries:
			if !ok {
				return fmt.Errorf("rabbitmq: run: consumer closed: %w", c.lostReason())
			}
			now = c.clock.Now()
			c.arrive(d, now)
		drain: // take what else has arrived, so it joins the next batch
			for range drainMax {
				select {
				case d, ok := <-c.deliveries:
					if !ok {
						return fmt.Errorf("rabbitmq: run: consumer closed: %w", c.lostReason())
					}
					c.arrive(d, now)
				default:
					break drain
				}
			}
		case <-c.s.reowned:
			if err := c.reown(); err != nil {
				return err
			}
		case d := <-c.partDeliveries:
			now = c.clock.Now()
			c.arrive(d, now)
		case r := <-delivered:
			delivering = false
			if err := c.delivered(ctx, r, &backoff, &retryAt); err != nil {
				return err
			}
		case r := <-republished:
			republishing = false
			if err := c.republished(r); err != nil {
				return err
			}
		case <-timer.C:
		}
	}
}

// arrive sorts the timers of one delivery: due, held for its last
// stretch, or early; a timer of a partition this process does not own
// (from the queue every node reads, or from a partition lost since) is sent
// on to its partition's queue, or its next tier, as an early one is.
func (c *consumer) arrive(d amqp.Delivery, now time.Time) {
	ts, err := decode(d.Body)
	if err != nil {
		// Requeueing it would bring it straight back; the sweeper closes
		// the order if it was one of ours.
		c.log.Error("rabbitmq: dropping a message that is not a timer", "queue", c.topo.due, "message_id", d.MessageId, "err", err)
		c.ch.Reject(d.DeliveryTag, false)
		return
	}
	msg := &arrival{tag: d.DeliveryTag, left: len(ts)}
	for _, t := range ts {
		p := pending{msg: msg, timer: t}
		remaining := t.At.Sub(now)
		switch {
		case !c.s.owns(t.ID):
			c.retier = append(c.retier, p)
		case remaining <= 0:
			c.ready = append(c.ready, p)
		case c.topo.route(remaining).toDue():
			heap.Push(&c.held, p)
		default:
			c.retier = append(c.retier, p)
		}
	}
}

// delivered acknowledges the messages whose every timer is now delivered
// or forwarded, or, if Deliver failed, hands the batch's messages back to
// the queue and delays the next Deliver by a capped exponential backoff
// (the store is probably down; the broker redelivers them at once, to this
// consumer or another).
func (c *consumer) delivered(ctx context.Context, r batchResult, backoff *time.Duration, retryAt *time.Time) error {
	if r.err != nil {
		*backoff = min(max(2**backoff, 50*time.Millisecond), c.cfg.RetryMax)
		*retryAt = c.clock.Now().Add(*backoff)
		if ctx.Err() == nil { // else Run is stopping, and Deliver with it
			c.log.Warn("rabbitmq: deliver failed; the timers go back to the queue", "timers", len(r.batch), "retry_in", *backoff, "err", r.err)
		}
		for _, p := range r.batch {
			if p.msg.nacked {
				continue
			}
			p.msg.nacked = true
			if err := c.ch.Nack(p.msg.tag, false, true); err != nil {
				return fmt.Errorf("rabbitmq: run: nack: %w", err)
			}
		}
		return nil
	}
	*backoff = 0
	if err := c.done(r.batch); err != nil {
		return fmt.Errorf("rabbitmq: run: ack %d delivered timers: %w", len(r.batch), err)
	}
	return nil
}

// republished acknowledges the arrivals whose timers are now confirmed in
// their next tier (and delivered, for the rest of a packed message). A
// failed publish ends Run: the channel is probably gone, and the
// unacknowledged arrivals come back from the broker.
func (c *consumer) republished(r batchResult) error {
	if r.err != nil {
		return fmt.Errorf("rabbitmq: run: send %d early timers to their next tier: %w", len(r.batch), r.err)
	}
	if err := c.done(r.batch); err != nil {
		return fmt.Errorf("rabbitmq: run: ack %d forwarded timers: %w", len(r.batch), err)
	}
	return nil
}

// done counts the batch's timers off their messages and acknowledges each
// message whose last timer this was; a message handed back is left alone.
func (c *consumer) done(batch []pending) error {
	for _, p := range batch {
		if p.msg.nacked {
			continue
		}
		if p.msg.left--; p.msg.left == 0 {
			if err := c.ch.Ack(p.msg.tag, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// lostReason returns why the connection or a channel closed, if known.
func (c *consumer) lostReason() error {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case e := <-c.connLost:
		return closeReason(e)
	case e := <-c.chLost:
		return closeReason(e)
	case <-t.C:
		return errors.New("the channel closed")
	}
}

func closeReason(e *amqp.Error) error {
	if e == nil {
		return errors.New("closed")
	}
	return e
}

// take removes and returns up to n items from the front of *q, dropping
// those of messages handed back to the queue (they come again).
func (c *consumer) take(q *[]pending, n int) []pending {
	batch := make([]pending, 0, min(n, len(*q)))
	i := 0
	for ; i < len(*q) && len(batch) < n; i++ {
		if p := (*q)[i]; !p.msg.nacked {
			batch = append(batch, p)
		}
	}
	*q = append((*q)[:0], (*q)[i:]...)
	return batch
}

func timersOf(batch []pending) []hourglass.DueItem {
	out := make([]hourglass.DueItem, len(batch))
	for i, p := range batch {
		out[i] = p.timer
	}
	return out
}

// heldHeap is a min-heap of pending deliveries by deadline.
type heldHeap []pending

func (h heldHeap) Len() int           { return len(h) }
func (h heldHeap) Less(i, j int) bool { return h[i].timer.At.Before(h[j].timer.At) }
func (h heldHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *heldHeap) Push(x any)        { *h = append(*h, x.(pending)) }
func (h *heldHeap) Pop() any {
	old := *h
	p := old[len(old)-1]
	*h = old[:len(old)-1]
	return p
}
