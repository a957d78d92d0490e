// Command bench is `hourglass bench` with peers: it runs the same workload on
// hourglass's delay mechanisms and then on the systems a user would pick
// instead (asynq on Redis, River on PostgreSQL, each at its defaults and at
// its best documented settings), and prints one table with every system's
// p99 lateness as a ratio against the first, hourglass's default engine.
//
// It lives in its own Go module so that the product's go.mod never requires
// asynq or River. It only parses flags and wires the peers in; the runner is
// package benchmark, flags and all.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/benchmark"
	"github.com/hourglass/hourglass/peers/asynqpeer"
	"github.com/hourglass/hourglass/peers/riverpeer"
)

type cli struct {
	LogLevel    slog.Level        `help:"Log level: debug, info, warn, error." default:"info" env:"HOURGLASS_LOG_LEVEL"`
	Bench       benchmark.Command `embed:""`
	Peers       string            `help:"Comma-separated peer systems to run after --backends: asynq, asynq-tuned, river, river-tuned (none for none)." default:"asynq,asynq-tuned,river,river-tuned"`
	PostgresURL string            `help:"PostgreSQL for the river peers; each run migrates River into a schema of its own and drops it afterwards." default:"postgres://postgres@127.0.0.1:5432/test?sslmode=disable" env:"HOURGLASS_BENCH_POSTGRES_URL"`
}

// peerNames are the peers, in the order --peers lists them by default.
var peerNames = []string{"asynq", "asynq-tuned", "river", "river-tuned"}

func main() {
	var c cli
	kong.Parse(&c,
		kong.Name("bench"),
		kong.Description("Measure hourglass's delay mechanisms and its peers (asynq, River) side by side under one workload. The asynq peers use --redis-url."),
		kong.UsageOnError(),
	)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	peers, err := c.peers()
	if err == nil {
		err = c.Bench.Run(ctx, logger, peers)
	}
	if err != nil {
		logger.Error("bench: " + err.Error())
		os.Exit(1)
	}
}

// peers returns the --peers systems, each opening a fresh queue or schema
// that its Close deletes.
func (c *cli) peers() ([]benchmark.System, error) {
	// The peers log only errors, like the runner's own mechanisms.
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	redisURL, postgresURL := c.Bench.RedisURL, c.PostgresURL
	ns := c.Bench.DelayNamespace
	var systems []benchmark.System
	for _, name := range strings.Split(c.Peers, ",") {
		name = strings.TrimSpace(name)
		var open func(ctx context.Context, store hourglass.Store) (hourglass.Scheduler, error)
		switch name {
		case "", "none":
			continue
		case "asynq", "asynq-tuned":
			open = func(ctx context.Context, _ hourglass.Store) (hourglass.Scheduler, error) {
				cfg := asynqpeer.Config{URL: redisURL}
				if name == "asynq-tuned" {
					cfg = asynqpeer.Tuned(redisURL, "")
				}
				cfg.Queue = fmt.Sprintf("%s-bench-%s-%d", ns, name, time.Now().UnixNano())
				cfg.DropOnClose, cfg.Logger = true, quiet
				return asynqpeer.Open(ctx, cfg)
			}
		case "river", "river-tuned":
			open = func(ctx context.Context, _ hourglass.Store) (hourglass.Scheduler, error) {
				cfg := riverpeer.Config{URL: postgresURL}
				if name == "river-tuned" {
					cfg = riverpeer.Tuned(postgresURL, "")
				}
				cfg.Schema = benchSchema(ns, time.Now())
				cfg.DropOnClose, cfg.Logger = true, quiet
				return riverpeer.Open(ctx, cfg)
			}
		default:
			return nil, fmt.Errorf("--peers: unknown peer %q (want some of %s, or none)", name, strings.Join(peerNames, ", "))
		}
		if slices.ContainsFunc(systems, func(s benchmark.System) bool { return s.Name == name }) {
			return nil, fmt.Errorf("--peers: %s is listed twice", name)
		}
		systems = append(systems, benchmark.System{Name: name, Feed: hourglass.FeedOutbox, Open: open})
	}
	return systems, nil
}

var notInSchema = regexp.MustCompile(`[^a-z0-9_]+`)

// benchSchema is the River schema of one run: the namespace made a SQL
// identifier, "_bench_" and the time, within River's 46 bytes.
func benchSchema(ns string, now time.Time) string {
	suffix := fmt.Sprintf("_bench_%d", now.UnixNano())
	prefix := notInSchema.ReplaceAllString(strings.ToLower(ns), "_")
	prefix = prefix[:min(len(prefix), 46-len(suffix))]
	if prefix == "" || (prefix[0] >= '0' && prefix[0] <= '9') {
		prefix = "h" + prefix[min(len(prefix), 1):]
	}
	return prefix + suffix
}
