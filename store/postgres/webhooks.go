package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/timing"
	"github.com/jackc/pgx/v5"
)

// DeliveriesCreated implements hourglass.DeliveryStore. It fires after this
// store value's commits that created deliveries and, through LISTEN/NOTIFY,
// after any other store value's or process's on the same database and
// schema. It is a hint: it also fires after the listener reconnects.
func (s *Store) DeliveriesCreated() <-chan struct{} { return s.w.DeliveriesCreated() }

// listen keeps one connection, outside the pool, listening on the store's
// NOTIFY channels (deliveries, created orders), reconnecting with backoff
// until ctx ends. ready is closed after the first attempt, so Open can
// return with the listener in place.
func (s *Store) listen(ctx context.Context, ready chan<- struct{}) {
	defer s.wg.Done()
	backoff := timing.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second}
	first := true
	for {
		err := s.listenOnce(ctx, func() {
			backoff.Reset()
			if first {
				first = false
				close(ready)
			} else {
				// Notifications may have been missed while down.
				s.w.NotifyDeliveries()
				s.watches.push(nil, true)
				s.wakeRequests()
			}
		})
		if first {
			first = false
			close(ready)
		}
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Next()
		s.log.Warn("postgres: the NOTIFY listener lost its connection; reconnecting", "err", scrubErr(err, s.cfg.URL), "in", wait)
		if timing.Sleep(ctx, hourglass.SystemClock{}, wait) != nil {
			return
		}
	}
}

func scrubErr(err error, url string) string {
	if err == nil {
		return ""
	}
	return scrub(err.Error(), url)
}

// listenOnce connects, LISTENs on the three channels (then calls listening) and
// forwards notifications until the connection fails or ctx ends.
func (s *Store) listenOnce(ctx context.Context, listening func()) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// One simple-protocol query of three statements: one round trip.
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()+"; LISTEN "+pgx.Identifier{s.createdChannel}.Sanitize()+
		"; LISTEN "+pgx.Identifier{s.requestsChannel}.Sanitize()); err != nil {
		return err
	}
	listening()
	// The deliveries and requests channels' notices carry no payload:
	// hints to read, at most once per hintEvery (notices.go).
	clock := hourglass.WithTimers(hourglass.SystemClock{})
	deliveries, requests := newHint(clock, s.w.NotifyDeliveries), newHint(clock, s.wakeRequests)
	// Waited for without ctx, closing the connection when ctx ends
	// instead: pgconn watches a cancellable context with a goroutine per
	// call, a cost per notice that a flood multiplies.
	stop := context.AfterFunc(ctx, func() { _ = conn.PgConn().Conn().Close() })
	defer stop()
	wait := context.WithoutCancel(ctx)
	for {
		n, err := conn.WaitForNotification(wait)
		if err != nil {
			return err
		}
		switch n.Channel {
		case s.createdChannel:
			s.onCreated(n.Payload)
		case s.requestsChannel:
			if n.Payload != "" {
				s.rejected.add("requests", errNotEmpty)
				continue
			}
			requests.notify()
		default:
			if n.Payload != "" {
				s.rejected.add("deliveries", errNotEmpty)
				continue
			}
			deliveries.notify()
		}
	}
}

// errNotEmpty is why a notice with a payload on a channel of payload-less
// hints is rejected.
var errNotEmpty = errors.New("a payload on a channel whose notices have none")
