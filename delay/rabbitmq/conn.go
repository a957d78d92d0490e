package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/amqpdial"
)

// parseURL checks a broker URL and returns it with the address and user for
// error messages. The errors never contain the password.
func parseURL(raw string) (amqp.URI, error) {
	uri, err := amqp.ParseURI(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return uri, fmt.Errorf("bad URL: %v (want amqp://user:password@host:5672/vhost, reserved characters in the user or password percent-encoded)", err)
	}
	return uri, nil
}

func address(uri amqp.URI) string { return net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port)) }

// dial opens a connection named after its role (it shows in the management
// UI). The TCP connect honours ctx; the TCP connect and the AMQP handshake
// together are bounded by the dial timeout. Errors are one line saying what
// to fix.
func (s *Scheduler) dial(ctx context.Context, role string) (*amqp.Connection, error) {
	cfg := amqpdial.Config(ctx, "hourglass "+s.cfg.Namespace+" "+role, s.cfg.DialTimeout)
	conn, err := amqp.DialConfig(s.cfg.URL, cfg)
	if err != nil {
		return nil, explainDial(err, s.uri)
	}
	return conn, nil
}

// explainDial turns a dial error into one line that says what to fix.
func explainDial(err error, uri amqp.URI) error {
	addr := address(uri)
	var ae *amqp.Error
	var ne net.Error
	switch {
	case errors.As(err, &ae) && ae.Code == amqp.AccessRefused && ae.Reason == amqp.ErrCredentials.Reason:
		return fmt.Errorf("login refused for user %q at %s: check the user and password in the URL (the guest user may log in only from localhost)", uri.Username, addr)
	case errors.As(err, &ae) && (ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed):
		return fmt.Errorf("user %q may not open vhost %q at %s (%s): create the vhost or grant the user access to it", uri.Username, uri.Vhost, addr, ae.Reason)
	case errors.As(err, &ae) && ae.Server:
		return fmt.Errorf("the broker at %s refused the connection: %s (code %d)", addr, ae.Reason, ae.Code)
	case errors.As(err, &ae):
		// The library reports a network failure in the handshake as a
		// client-side frame error.
		return fmt.Errorf("no AMQP handshake with %s: %s (is RabbitMQ running there, and is it its AMQP port?)", addr, ae.Reason)
	case errors.As(err, &ne):
		return fmt.Errorf("cannot reach RabbitMQ at %s: %v (is it running and listening there?)", addr, err)
	}
	return fmt.Errorf("connect to RabbitMQ at %s: %v", addr, err)
}

// explainDeclare turns an error declaring what into one line.
func explainDeclare(what, name string, err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused:
			return fmt.Errorf("declare %s %q: %s: %s", what, name, ae.Reason, permissionsHint)
		case amqp.PreconditionFailed:
			return fmt.Errorf("declare %s %q: it exists with other settings (%s): delete it or use another namespace", what, name, ae.Reason)
		}
		return fmt.Errorf("declare %s %q: %w", what, name, ae)
	}
	return fmt.Errorf("declare %s %q: %w", what, name, err)
}

const permissionsHint = "grant the user configure, write and read permissions on the names that start with the namespace, and write permission on amq.default"

// explainAccess turns a refused operation into one line.
func explainAccess(what, name string, err error) error {
	if name != "" {
		what += fmt.Sprintf(" %q", name)
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.AccessRefused {
		return fmt.Errorf("%s: %s: %s", what, ae.Reason, permissionsHint)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// publishChunk is the most timers (so at most as many messages) published
// before waiting for their confirms; returns buffer one chunk.
const publishChunk = 1000

// publisher publishes timers on a channel in confirm mode to where their
// remaining delay sends them. Not safe for concurrent use.
type publisher struct {
	ch       *amqp.Channel
	closed   chan *amqp.Error // the channel's close, with the broker's reason
	returns  chan amqp.Return
	topo     topology
	clock    hourglass.Clock
	declared [tierCount]bool // tiers declared on this channel
}

func newPublisher(conn *amqp.Connection, topo topology, clock hourglass.Clock) (*publisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open publishing channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	// The library hands a return to this channel before it processes the
	// confirm that follows it; one chunk's worth of room means it never
	// waits for us.
	returns := ch.NotifyReturn(make(chan amqp.Return, publishChunk))
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	p := &publisher{ch: ch, closed: closed, returns: returns, topo: topo, clock: clock}
	p.declared[0] = true // by topology.declare, before any publisher
	return p, nil
}

// publish publishes timers persistently and returns once the broker
// confirmed every message: nil if all were accepted and routed, an error if
// any was nacked, returned unroutable, or the channel closed first. Timers
// that go to the same place (a tier, the due queue, the same plugin delay)
// travel packed, up to packMax a message: each of them has at least that
// tier's TTL plus the margin left, so the message's tier suits all. After
// an error some may have been published: a retry duplicates them, which is
// allowed.
func (p *publisher) publish(ctx context.Context, timers []hourglass.DueItem) error {
	for start := 0; start < len(timers); start += publishChunk {
		chunk := timers[start:min(start+publishChunk, len(timers))]
		now := p.clock.Now()
		var (
			routes []route
			groups = map[route][]hourglass.DueItem{}
		)
		for _, t := range chunk {
			r := p.topo.route(t.At.Sub(now))
			if r.toDue() {
				// The last stretch is waited out by the owner of the
				// timer's partition, so it waits in the partition's queue.
				r = p.topo.partRoute(hourglass.PartitionOf(t.ID))
			}
			if _, ok := groups[r]; !ok {
				routes = append(routes, r)
			}
			groups[r] = append(groups[r], t)
		}
		var confirms []*amqp.DeferredConfirmation
		for _, r := range routes {
			if r.tier >= 0 && !p.declared[r.tier] {
				if err := p.topo.declareTier(p.ch, r.tier); err != nil {
					return err
				}
				p.declared[r.tier] = true
			}
			g := groups[r]
			for i := 0; i < len(g); i += packMax {
				pack := g[i:min(i+packMax, len(g))]
				dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, r.exchange, r.key, r.mandatory, false, encode(pack, r, now))
				if err != nil {
					return fmt.Errorf("publish %d timers (order %d first): %w", len(pack), pack[0].ID, err)
				}
				confirms = append(confirms, dc)
			}
		}
		nacked := 0
		for _, dc := range confirms {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return fmt.Errorf("wait for publisher confirms: %w", err)
			}
			if !ok {
				nacked++
			}
		}
		if nacked > 0 {
			if p.ch.IsClosed() {
				return fmt.Errorf("the channel closed before %d of %d publishes were confirmed: %w", nacked, len(confirms), p.closeReason())
			}
			return fmt.Errorf("the broker refused %d of %d publishes (nack)", nacked, len(confirms))
		}
		if n, ret := drainReturns(p.returns); n > 0 {
			return fmt.Errorf("%d publishes unroutable: %d %s from exchange %q with key %q (was queue %q deleted?)",
				n, ret.ReplyCode, ret.ReplyText, ret.Exchange, ret.RoutingKey, ret.RoutingKey)
		}
	}
	return nil
}

// drainReturns empties returns and reports how many there were and the
// first.
func drainReturns(returns chan amqp.Return) (int, amqp.Return) {
	var first amqp.Return
	n := 0
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				return n, first
			}
			if n == 0 {
				first = r
			}
			n++
		default:
			return n, first
		}
	}
}

func (p *publisher) broken() bool { return p.ch.IsClosed() }

// closeReason returns why the channel closed; call it once it has.
func (p *publisher) closeReason() error {
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case e, ok := <-p.closed:
		if ok && e != nil {
			return e
		}
	case <-t.C:
	}
	return errors.New("closed")
}
