package delay

import (
	"log/slog"
	"time"

	"github.com/hourglass/hourglass"
)

// Flags are the delay mechanisms' settings as command-line flags (kong
// tags), shared by `hourglass serve` and `hourglass bench`.
type Flags struct {
	DelayNamespace string        `help:"Prefix of every key, queue, topic or stream the delay mechanism creates." default:"hourglass" env:"HOURGLASS_DELAY_NAMESPACE"`
	PollInterval   time.Duration `help:"Scan interval of --delay sqlpoll." default:"1s" env:"HOURGLASS_POLL_INTERVAL"`
	RedisURL       string        `help:"Redis for --delay redis and rediskeyspace." default:"redis://127.0.0.1:6379/0" env:"HOURGLASS_REDIS_URL"`
	RabbitMQURL    string        `name:"rabbitmq-url" help:"RabbitMQ for --delay rabbitmq." default:"amqp://guest:guest@127.0.0.1:5672/" env:"HOURGLASS_RABBITMQ_URL"`
	KafkaURL       string        `help:"Kafka brokers for --delay kafka, as kafka://host:port[,host:port]." default:"kafka://127.0.0.1:9092" env:"HOURGLASS_KAFKA_URL"`
	NATSURL        string        `name:"nats-url" help:"NATS with JetStream for --delay nats." default:"nats://127.0.0.1:4222" env:"HOURGLASS_NATS_URL"`
}

// Options returns the Options the flags describe.
func (f Flags) Options(store hourglass.Store, clock hourglass.Clock, log *slog.Logger) Options {
	return Options{
		Store:        store,
		Clock:        clock,
		Logger:       log,
		Namespace:    f.DelayNamespace,
		PollInterval: f.PollInterval,
		RedisURL:     f.RedisURL,
		RabbitMQURL:  f.RabbitMQURL,
		KafkaURL:     f.KafkaURL,
		NATSURL:      f.NATSURL,
	}
}
