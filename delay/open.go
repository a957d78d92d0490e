// Package delay opens a delay mechanism by name. It is the one place that
// knows every mechanism; each lives in its own subpackage.
package delay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/wheel"
)

// Names lists the mechanisms Open knows, the default first.
func Names() []string {
	return []string{"wheel", "heap", "gotimer", "sqlpoll", "redis", "rediskeyspace", "rabbitmq", "kafka", "nats"}
}

// FeedOf returns how timers reach the named mechanism, so the store can be
// opened with an outbox before the mechanism itself.
func FeedOf(name string) hourglass.Feed {
	switch name {
	case "sqlpoll":
		return hourglass.FeedNone
	case "redis", "rediskeyspace", "rabbitmq", "kafka", "nats":
		return hourglass.FeedOutbox
	}
	return hourglass.FeedWindow
}

// Default connection URLs: the services' standard loopback addresses.
const (
	RedisURLDefault    = "redis://127.0.0.1:6379/0"
	RabbitMQURLDefault = "amqp://guest:guest@127.0.0.1:5672/"
	KafkaURLDefault    = "kafka://127.0.0.1:9092"
	NATSURLDefault     = "nats://127.0.0.1:4222"
	NamespaceDefault   = "hourglass"
)

// Options carries what any mechanism may need; each uses its own fields.
type Options struct {
	// Store is the order database, for mechanisms that read deadlines from
	// it (sqlpoll).
	Store  hourglass.Store
	Clock  hourglass.Clock
	Logger *slog.Logger
	// Namespace prefixes every key, queue, topic or stream the mechanism
	// creates, so several deployments can share a broker.
	Namespace string
	// PollInterval is sqlpoll's scan interval (default 1 s).
	PollInterval time.Duration
	// Parts, when set, returns the partitions this node owns; sqlpoll
	// scans only their orders.
	Parts       func() hourglass.Parts
	RedisURL    string
	RabbitMQURL string
	KafkaURL    string // kafka://host:port[,host:port…]
	NATSURL     string
}

// Destroyer is implemented by the mechanisms that keep objects of their own
// per namespace on their broker (RabbitMQ's queues and exchanges, NATS's
// streams, Redis's keys): Destroy deletes them, with every timer in them, before or
// after Close. For tests, and for retiring a namespace.
type Destroyer interface {
	Destroy(ctx context.Context) error
}

// Open connects the named mechanism and checks it can work (reachable,
// permitted, its queues or streams declared): a mistake is an error here,
// at start-up, not later.
func Open(ctx context.Context, name string, o Options) (hourglass.Scheduler, error) {
	if o.Clock == nil {
		o.Clock = hourglass.SystemClock{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Namespace == "" {
		o.Namespace = NamespaceDefault
	}
	switch name {
	case "wheel":
		return wheel.New(wheel.Config{Clock: o.Clock, Logger: o.Logger}), nil
	case "heap":
		return openHeap(ctx, o)
	case "gotimer":
		return openGotimer(ctx, o)
	case "sqlpoll":
		return openSQLPoll(ctx, o)
	case "redis":
		return openRedis(ctx, o)
	case "rediskeyspace":
		return openRedisKeyspace(ctx, o)
	case "rabbitmq":
		return openRabbitMQ(ctx, o)
	case "kafka":
		return openKafka(ctx, o)
	case "nats":
		return openNATS(ctx, o)
	}
	return nil, fmt.Errorf("unknown delay mechanism %q (want one of %s)", name, strings.Join(Names(), ", "))
}

// Valid reports whether name is a known mechanism.
func Valid(name string) bool { return slices.Contains(Names(), name) }
