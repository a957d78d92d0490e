package postgres

import (
	"context"
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
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch n.Channel {
		case s.createdChannel:
			s.onCreated(n.Payload)
		case s.requestsChannel:
			s.wakeRequests()
		default:
			s.w.NotifyDeliveries()
		}
	}
}
