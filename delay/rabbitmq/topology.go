package rabbitmq

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hourglass/hourglass"
)

// Tiers returns the TTLs of the delay tiers, shortest first: 1 s doubling up
// to 2^19 s (about 6 days). Each is one quorum queue "<ns>.tier.<seconds>s".
// A remaining delay d goes to the longest tier whose TTL is at most d minus
// the margin, so a delay up to 2^20 s takes at most one hop per tier (a
// 30-minute order takes 5 or 6) and never more than 20. The result is a fresh
// slice.
func Tiers() []time.Duration {
	out := make([]time.Duration, tierCount)
	for i := range out {
		out[i] = time.Second << i
	}
	return out
}

const tierCount = 20

// dueKey routes dead-lettered and plugin-delayed messages from the router or
// delayed exchange to the due queue.
const dueKey = "due"

// topology names a namespace's exchanges and queues and decides where a
// timer with a given remaining delay is published. Immutable.
type topology struct {
	router  string // direct exchange: the tiers' dead-letter exchange
	due     string // the queue the consumers read: ns.due, or in plugin mode ns.due.delayed
	quorum  string // ns.due, the quorum queue bound to the router (declared in both modes)
	delayed string // x-delayed-message exchange, in plugin mode only
	tiers   []time.Duration
	names   []string // queue of each tier
	// parts are the partitions' due queues, ns.due.<p>: a timer in its
	// last stretch waits in its partition's, read by the partition's
	// owner; due (and quorum) are the queues every node reads and sorts.
	parts  [hourglass.Partitions]string
	margin time.Duration
	plugin bool
}

func newTopology(ns string, margin time.Duration, plugin bool) topology {
	t := topology{
		router: ns + ".router",
		due:    ns + ".due",
		quorum: ns + ".due",
		margin: margin,
		plugin: plugin,
		tiers:  Tiers(),
	}
	if plugin {
		t.delayed = ns + ".delayed"
		t.due = pluginDueName(ns)
	}
	for _, ttl := range t.tiers {
		t.names = append(t.names, tierName(ns, ttl))
	}
	for p := range t.parts {
		t.parts[p] = ns + ".due." + strconv.Itoa(p)
	}
	return t
}

// partRoute is where a timer of partition p in its last stretch goes: its
// partition's due queue, through the default exchange.
func (t topology) partRoute(p int) route {
	return route{key: t.parts[p], mandatory: true, tier: -1}
}

// pluginDueName is the due queue of plugin mode: a classic queue, not a
// quorum one. When the broker starts, the plugin fires every message that
// fell due while it was down, without publisher confirms; a quorum queue
// that has not elected its leader yet drops them ("leader not known"), a
// classic queue is local to the node and is recovered before. The plugin
// keeps its delayed messages on one node too, so the classic queue loses no
// replication they had.
func pluginDueName(ns string) string { return ns + ".due.delayed" }

func tierName(ns string, ttl time.Duration) string {
	return ns + ".tier." + strconv.FormatInt(int64(ttl/time.Second), 10) + "s"
}

// route is where one publish goes.
type route struct {
	exchange  string
	key       string
	mandatory bool  // set where the broker can tell us the target is missing
	delay     int64 // x-delay in ms, plugin mode only
	tier      int   // index into topology.tiers, or -1 for the due queue
}

// toDue reports whether the route is the due queue itself: the consumer holds
// such a timer in memory for its last stretch instead of publishing it again.
func (r route) toDue() bool { return r.tier < 0 && r.delay == 0 }

// route returns where a timer with remaining delay d is published.
// Tiers: the longest tier whose TTL is <= d-margin; none fits, the due queue
// (the consumer waits out the rest, at most the shortest TTL plus the
// margin). Plugin: the same last stretch in memory (under the shortest tier
// plus the margin: the due queue), else the delayed exchange with x-delay
// d-margin, so the timer comes out with the margin left and the consumer
// waits out the rest in memory: the plugin fires bursts slowly, and the
// margin absorbs that as it does the tiers' dead-lettering.
func (t topology) route(d time.Duration) route {
	if t.plugin {
		if d < t.tiers[0]+t.margin {
			return route{key: t.due, mandatory: true, tier: -1}
		}
		// The plugin does not support mandatory: it cannot route at publish
		// time. Round down: the consumer holds what is left.
		ms := (d - t.margin) / time.Millisecond
		return route{exchange: t.delayed, key: dueKey, delay: int64(ms), tier: -1}
	}
	i := pickTier(t.tiers, d-t.margin)
	if i < 0 {
		return route{key: t.due, mandatory: true, tier: -1}
	}
	return route{key: t.names[i], mandatory: true, tier: i}
}

// pickTier returns the index of the longest of tiers (ascending) that is <=
// d, or -1 if none is.
func pickTier(tiers []time.Duration, d time.Duration) int {
	i := -1
	for j, ttl := range tiers {
		if ttl > d {
			break
		}
		i = j
	}
	return i
}

// declare creates the namespace's topology on ch, idempotently: the router
// exchange, the due queue bound to it, then the shortest tier (or the
// delayed exchange), so a dead-lettered message always has somewhere to go
// (if the target were missing the broker would retry only every 3 minutes).
// Longer tiers are declared by the publisher on first use (declareTier):
// fewer quorum queues, and fewer dead-letter workers on the broker.
func (t topology) declare(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(t.router, amqp.ExchangeDirect, true, false, false, false, nil); err != nil {
		return explainDeclare("exchange", t.router, err)
	}
	if _, err := ch.QueueDeclare(t.due, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		return explainDeclare("queue", t.due, err)
	}
	if err := ch.QueueBind(t.due, dueKey, t.router, false, nil); err != nil {
		return explainDeclare("binding of queue", t.due, err)
	}
	if t.plugin {
		if err := ch.ExchangeDeclare(t.delayed, delayedExchangeType, true, false, false, false, delayedArgs); err != nil {
			return explainDeclare("exchange", t.delayed, err)
		}
		if _, err := ch.QueueDeclare(t.due, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic}); err != nil {
			return explainDeclare("queue", t.due, err)
		}
		if err := ch.QueueBind(t.due, dueKey, t.delayed, false, nil); err != nil {
			return explainDeclare("binding of queue", t.due, err)
		}
		// Before the classic due queue, the delayed exchange was bound
		// to the quorum one: no longer (unbinding a missing binding is
		// not an error).
		if err := ch.QueueUnbind(t.quorum, dueKey, t.delayed, nil); err != nil {
			return explainDeclare("unbinding of queue", t.quorum, err)
		}
		return nil
	}
	return t.declareTier(ch, 0)
}

// declareParts declares the partitions' due queues, idempotently, on
// declareChannels channels of conn at once. They are classic durable
// queues, not quorum ones: each holds a timer's last stretch (under 2 s)
// with persistent messages under publisher confirms, so a broker restart
// keeps them, and a timer lost with a broker node of a cluster is closed by
// the sweeper from the database. 64 quorum queues per namespace are 64 Raft
// groups: a test run creating and deleting some 900 of them left a
// single-node broker accepting TCP and completing no AMQP handshake.
func (t topology) declareParts(conn *amqp.Connection) error {
	errs := make([]error, declareChannels)
	var wg sync.WaitGroup
	for i := range declareChannels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := conn.Channel()
			if err != nil {
				errs[i] = fmt.Errorf("open channel: %w", err)
				return
			}
			defer ch.Close()
			for p := i; p < len(t.parts); p += declareChannels {
				if _, err := ch.QueueDeclare(t.parts[p], true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic}); err != nil {
					errs[i] = explainDeclare("queue", t.parts[p], err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

const declareChannels = 8

// declareTier declares tier i's queue, idempotently.
func (t topology) declareTier(ch *amqp.Channel, i int) error {
	if _, err := ch.QueueDeclare(t.names[i], true, false, false, false, tierArgs(t.router, t.tiers[i])); err != nil {
		err = explainDeclare("queue", t.names[i], err)
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.InternalError {
			// Seen on RabbitMQ 3.10 once its dead-letter worker supervisor
			// has given up: no at-least-once quorum queue can start.
			err = fmt.Errorf("%w (if the broker log shows rabbit_fifo_dlx_sup noproc, restart the RabbitMQ node)", err)
		}
		return err
	}
	return nil
}

// tierArgs are a tier queue's arguments. At-least-once dead-lettering keeps
// an expired message in the tier until the due queue confirmed it; RabbitMQ
// applies it only with reject-publish overflow and otherwise falls back to
// at-most-once, saying so only in its log.
func tierArgs(router string, ttl time.Duration) amqp.Table {
	return amqp.Table{
		amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
		amqp.QueueMessageTTLArg:     ttl.Milliseconds(),
		"x-dead-letter-exchange":    router,
		"x-dead-letter-routing-key": dueKey,
		"x-dead-letter-strategy":    "at-least-once",
		amqp.QueueOverflowArg:       amqp.QueueOverflowRejectPublish,
	}
}

const delayedExchangeType = "x-delayed-message"

var delayedArgs = amqp.Table{"x-delayed-type": amqp.ExchangeDirect}

// deleteAll removes every queue and exchange of namespace ns, in either
// mode; RabbitMQ does not treat deleting a missing one as an error. Messages
// in them are lost.
func deleteAll(ch *amqp.Channel, ns string) error {
	t := newTopology(ns, 0, true)
	for _, q := range append(append(t.names, t.quorum, t.due), t.parts[:]...) {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			return fmt.Errorf("delete queue %q: %w", q, err)
		}
	}
	for _, ex := range []string{t.router, t.delayed} {
		if err := ch.ExchangeDelete(ex, false, false); err != nil {
			return fmt.Errorf("delete exchange %q: %w", ex, err)
		}
	}
	return nil
}

// message is one timer or several as they travel through the broker. A
// message of one timer has its fields at the top level (the only shape
// before packing, still written for one timer so that a process of an
// older version reads it); a packed message lists its timers.
type message struct {
	OrderID    int64         `json:"order_id,omitempty"`
	DeadlineMs int64         `json:"deadline_ms,omitempty"`
	Timers     []packedTimer `json:"timers,omitempty"`
}

type packedTimer struct {
	OrderID    int64 `json:"order_id"`
	DeadlineMs int64 `json:"deadline_ms"`
}

// packMax is the most timers one message carries. The broker's cost is per
// message (a tier dead-letters a few thousand messages a second), so a
// burst of timers published together travels as a few hundred messages
// rather than as many messages as timers; a packed body stays under 16 KiB.
const packMax = 256

// encode returns the publishing of ts (1..packMax timers routed alike); it
// is persistent and has no per-message TTL (which would wait behind the
// queue's head).
func encode(ts []hourglass.DueItem, r route, now time.Time) amqp.Publishing {
	var (
		m       message
		headers amqp.Table
		id      string
	)
	if len(ts) == 1 {
		t := ts[0]
		m = message{OrderID: t.ID, DeadlineMs: hourglass.UnixMilli(t.At)}
		headers = amqp.Table{"x-order-id": t.ID, "x-deadline-ms": m.DeadlineMs}
		id = strconv.FormatInt(t.ID, 10)
	} else {
		m.Timers = make([]packedTimer, len(ts))
		for i, t := range ts {
			m.Timers[i] = packedTimer{OrderID: t.ID, DeadlineMs: hourglass.UnixMilli(t.At)}
		}
		headers = amqp.Table{"x-timers": int64(len(ts))}
		id = fmt.Sprintf("%d+%d", ts[0].ID, len(ts)-1)
	}
	body, _ := json.Marshal(m) // cannot fail: integers
	if r.delay > 0 {
		headers["x-delay"] = r.delay
	}
	return amqp.Publishing{
		Headers:      headers,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    id,
		Timestamp:    now,
		Type:         "hourglass.timer",
		Body:         body,
	}
}

// decode returns the timers in a message body, one or packed.
func decode(body []byte) ([]hourglass.DueItem, error) {
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("not a timer: %w", err)
	}
	if m.Timers == nil {
		if m.OrderID <= 0 || m.DeadlineMs <= 0 {
			return nil, fmt.Errorf("not a timer: order_id %d, deadline_ms %d", m.OrderID, m.DeadlineMs)
		}
		return []hourglass.DueItem{{ID: m.OrderID, At: hourglass.FromUnixMilli(m.DeadlineMs)}}, nil
	}
	if m.OrderID != 0 || m.DeadlineMs != 0 || len(m.Timers) == 0 || len(m.Timers) > packMax {
		return nil, fmt.Errorf("not a timer: a packed message of %d timers (1..%d) with order_id %d", len(m.Timers), packMax, m.OrderID)
	}
	out := make([]hourglass.DueItem, len(m.Timers))
	for i, t := range m.Timers {
		if t.OrderID <= 0 || t.DeadlineMs <= 0 {
			return nil, fmt.Errorf("not a timer: timers[%d]: order_id %d, deadline_ms %d", i, t.OrderID, t.DeadlineMs)
		}
		out[i] = hourglass.DueItem{ID: t.OrderID, At: hourglass.FromUnixMilli(t.DeadlineMs)}
	}
	return out, nil
}
