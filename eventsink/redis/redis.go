// Package redis is the Redis Streams event sink
// (redis://[user:password@]host:port/db?stream=name[&maxlen=n]): each event
// is one entry XADDed to the stream, with fields id, type, key and body
// (the event's JSON). The entries of one Publish are pipelined on one
// connection, so they are appended in order. maxlen, when set, trims the
// stream approximately (MAXLEN ~) on each XADD. It uses go-redis, as
// delay/redis does.
package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass/eventsink"
)

// TimeoutDefault bounds connecting and each publish.
const TimeoutDefault = 10 * time.Second

// Config configures a Sink.
type Config struct {
	// URL is redis[s]://[user:password@]host:port/db?stream=name[&maxlen=n]
	// (any other parameter is go-redis's).
	URL string
	// Timeout bounds Open and each Publish (default TimeoutDefault).
	Timeout time.Duration
}

// Target is what a sink URL names.
type Target struct {
	Options *goredis.Options
	Stream  string
	MaxLen  int64 // 0: no trimming
}

// ParseURL returns what a redis:// sink URL names, or an error naming what
// is wrong.
func ParseURL(raw string) (Target, error) {
	var t Target
	u, err := url.Parse(raw)
	if err != nil {
		return t, errors.New("not a URL (percent-encode reserved characters in the user or password)")
	}
	q := u.Query()
	t.Stream = q.Get("stream")
	if t.Stream == "" {
		return t, errors.New("want redis://host:6379/0?stream=name: no stream parameter")
	}
	if ml := q.Get("maxlen"); ml != "" {
		if t.MaxLen, err = strconv.ParseInt(ml, 10, 64); err != nil || t.MaxLen < 1 {
			return t, fmt.Errorf("maxlen must be a positive integer, got %q", ml)
		}
	}
	q.Del("stream")
	q.Del("maxlen")
	u.RawQuery = q.Encode()
	if t.Options, err = goredis.ParseURL(u.String()); err != nil {
		return t, fmt.Errorf("bad address: %v", errors.Unwrap(err))
	}
	return t, nil
}

// Sink appends to one stream. It is used by one goroutine at a time.
type Sink struct {
	rdb     *goredis.Client
	target  Target
	timeout time.Duration
}

var _ eventsink.Sink = (*Sink)(nil)

// Open connects and checks that the server answers. Errors are one line
// naming the server.
func Open(ctx context.Context, cfg Config) (*Sink, error) {
	name := eventsink.Redact(cfg.URL)
	t, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("redis sink %s: %w", name, err)
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = TimeoutDefault
	}
	t.Options.DialTimeout = min(timeout, 5*time.Second)
	rdb := goredis.NewClient(t.Options)
	openCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := rdb.Ping(openCtx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis sink %s: no Redis server answers at %s: %w", name, t.Options.Addr, err)
	}
	return &Sink{rdb: rdb, target: t, timeout: timeout}, nil
}

// Publish implements eventsink.Sink: one pipeline of XADDs.
func (s *Sink) Publish(ctx context.Context, msgs []eventsink.Message) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	pipe := s.rdb.Pipeline()
	for _, m := range msgs {
		a := &goredis.XAddArgs{
			Stream: s.target.Stream,
			Values: []any{"id", m.ID, "type", string(m.Type), "key", m.Key, "body", m.Body},
		}
		if s.target.MaxLen > 0 {
			a.MaxLen, a.Approx = s.target.MaxLen, true
		}
		pipe.XAdd(ctx, a)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil {
		return fmt.Errorf("redis sink: XADD to %s: %w", s.target.Stream, err)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return fmt.Errorf("redis sink: XADD to %s: %w", s.target.Stream, err)
		}
	}
	return nil
}

// Close implements eventsink.Sink.
func (s *Sink) Close() error { return s.rdb.Close() }
