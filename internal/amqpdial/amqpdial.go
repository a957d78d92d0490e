// Package amqpdial is how hourglass connects to RabbitMQ, for both of its
// AMQP users (delay/rabbitmq and eventsink/amqp): a heartbeat, a
// connection name, and a dial whose TCP connect honours a context and
// whose TCP connect and AMQP handshake together are bounded by a timeout.
// It imports only the AMQP client.
package amqpdial

import (
	"context"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Heartbeat is the connections' heartbeat interval.
const Heartbeat = 10 * time.Second

// Config returns the amqp.Config of a connection named name (it shows in
// the management UI; "" leaves it unnamed) dialled within ctx and timeout.
func Config(ctx context.Context, name string, timeout time.Duration) amqp.Config {
	props := amqp.NewConnectionProperties()
	if name != "" {
		props.SetClientConnectionName(name)
	}
	return amqp.Config{
		Heartbeat:  Heartbeat,
		Locale:     "en_US",
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Heartbeats start after the handshake; until then only a
			// deadline stops a broker that accepted but does not answer.
			// The library clears it once the connection is open.
			if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		},
	}
}
