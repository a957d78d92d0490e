package processtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqpgo "github.com/rabbitmq/amqp091-go"
	goredis "github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/storetest"
)

// busMsg is one message a consumer read off a bus.
type busMsg struct{ id, key string }

// firstsByKey groups the event ids of got by key, each at its first
// arrival, in stream order, and counts the messages that repeat an id
// that came before them.
func firstsByKey(got []busMsg) (byKey map[string][]string, dups int) {
	byKey = map[string][]string{}
	seen := map[string]bool{}
	for _, m := range got {
		if seen[m.id] {
			dups++
			continue
		}
		seen[m.id] = true
		byKey[m.key] = append(byKey[m.key], m.id)
	}
	return byKey, dups
}

// readStream reads everything on a Redis stream the event sink wrote.
func readStream(t *testing.T, rdb *goredis.Client, stream string) []busMsg {
	msgs, err := rdb.XRange(t.Context(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]busMsg, len(msgs))
	for i, m := range msgs {
		id, _ := m.Values["id"].(string)
		key, _ := m.Values["key"].(string)
		out[i] = busMsg{id: id, key: key}
	}
	return out
}

// bus is a destination of one test's own on one broker: its --event-sink
// URL, and a reader of everything on it so far.
type bus struct {
	name string
	url  string
	read func(t *testing.T) []busMsg
}

// TestEventSinksSurviveKill (issue #23): one process publishes to every
// event sink this machine has (Kafka on kfake, RabbitMQ, NATS JetStream,
// Redis Streams) while 16 clients create, pay and cancel orders and arm
// timers; it is SIGKILLed under that load and restarted on the same
// database. Once every order has settled and every sink is caught up, every
// event of every order whose create was acknowledged (and of every timer
// armed) is on every bus, at least once, in order per key after dropping
// duplicates by id; the duplicates are counted. On every store: SQLite in
// the Brokers tier, the server stores in the Matrix tier
// (testenv.EveryCase). The SQLite case runs in parallel (after the
// sequential tests, beside TestBulkKill): it bounds no lateness, only that
// every event arrives within minutes. The Matrix tier's cases run one
// after the other, as before.
func TestEventSinksSurviveKill(t *testing.T) {
	testenv.EveryCase(t, testenv.Brokers, stores, nil, testEventSinksSurviveKill)
}

func testEventSinksSurviveKill(t *testing.T) {
	if testenv.Store(t, store.KindSQLite) == store.KindSQLite {
		t.Parallel()
	}
	buses := sinkBuses(t)
	dir := t.TempDir()
	bin := binary(t)
	dataDir := filepath.Join(dir, "data")
	dbURL := storetest.URL(t)
	args := []string{"--database-url", dbURL}
	for _, b := range buses {
		args = append(args, "--event-sink", b.url)
	}
	first := startHourglass(t, "first run", bin, dataDir, args...)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	t.Cleanup(transport.CloseIdleConnections)
	hc := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	client := api.NewClient(first.url, "", hc)
	if _, err := client.PutProduct(t.Context(), "sink-a", "sink-a", "", 1<<40); err != nil {
		t.Fatal(err)
	}

	var (
		stop    atomic.Bool
		mu      sync.Mutex
		acked   []int64  // orders whose create answered 201
		timers  []string // timers whose arm answered
		created atomic.Int64
		wg      sync.WaitGroup
	)
	for w := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 23))
			for n := 0; !stop.Load(); n++ {
				if n%10 == 9 {
					key := fmt.Sprintf("sink-timer-%d-%d", w, n)
					if _, _, err := client.ArmTimer(context.Background(), key, api.ArmTimerRequest{DelayMs: api.Delay(time.Duration(500+rng.IntN(2000)) * time.Millisecond)}); err == nil {
						mu.Lock()
						timers = append(timers, key)
						mu.Unlock()
					}
					continue
				}
				o, _, err := client.CreateOrder(context.Background(), api.CreateOrderRequest{UserID: fmt.Sprintf("w%d-%d", w, n), Items: []api.ItemJSON{{SKU: "sink-a", Quantity: 1}}, TimeoutMs: 1000 + rng.Int64N(2000)}, "")
				if err != nil {
					continue
				}
				created.Add(1)
				mu.Lock()
				acked = append(acked, o.ID)
				mu.Unlock()
				switch rng.IntN(4) {
				case 0:
					client.Pay(context.Background(), o.ID, "pay-"+strconv.FormatInt(o.ID, 10))
				case 1:
					client.Transition(context.Background(), o.ID, "cancel")
				}
			}
		})
	}
	testenv.Phase(t, 3*time.Second, "16 clients create, pay, cancel and arm timers before the SIGKILL")
	if err := first.cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	stop.Store(true)
	<-first.exited
	wg.Wait()
	transport.CloseIdleConnections()
	t.Logf("killed after %d acknowledged creates and %d timers armed", created.Load(), len(timers))

	second := startHourglass(t, "restart", bin, dataDir, args...)
	client = api.NewClient(second.url, "", hc)
	// Every order settles (deadlines within 3 s; the sweeper closes what
	// passed while the process was down) and every timer fires; then every
	// sink catches up: no lag, nothing more published for a second.
	testenv.Eventually(t, 60*time.Second, "every order settled", func() bool {
		l, err := client.ListOrders(t.Context(), "pending_payment", 1, 0)
		return err == nil && len(l.Orders) == 0
	})
	testenv.EventuallyEvery(t, 60*time.Second, 50*time.Millisecond, "every timer fired", func() bool {
		l, err := client.ListTimers(t.Context(), string(hourglass.TimerScheduled), 1, "")
		return err == nil && len(l.Timers) == 0
	})
	var last string
	testenv.EventuallyEvery(t, 120*time.Second, time.Second, "every sink caught up", func() bool {
		m := sinkMetrics(t, second.url)
		caught := m == last && strings.Contains(m, "hourglass_event_sink_lag_seconds{")
		for _, line := range strings.Split(m, "\n") {
			if strings.HasPrefix(line, "hourglass_event_sink_lag_seconds{") && !strings.HasSuffix(line, " 0") {
				caught = false
			}
		}
		last = m // the published counts unchanged for a second (a tick), and no lag
		return caught
	})
	t.Logf("sinks after the restart:\n%s", last)
	if err := second.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-second.exited

	// The database's events, by order (or timer) id.
	want := eventsByID(t, dbURL, dataDir)
	for _, b := range buses {
		got := b.read(t)
		byKey, dup := firstsByKey(got)
		seen := make(map[string]bool, len(got))
		for _, m := range got {
			seen[m.id] = true
		}
		missing, checked := 0, 0
		for _, id := range acked {
			evs := want[id]
			if len(evs) == 0 {
				t.Errorf("%s: order %d (acknowledged) has no event in the database", b.name, id)
				continue
			}
			var ids []string
			for _, e := range evs {
				checked++
				ids = append(ids, e.ID)
				if !seen[e.ID] {
					missing++
				}
			}
			if k := strconv.FormatInt(id, 10); missing == 0 && strings.Join(byKey[k], ",") != strings.Join(ids, ",") {
				t.Errorf("%s: order %d: events %v on the bus, want %v in this order", b.name, id, byKey[k], ids)
			}
		}
		timerEvents := 0
		for _, key := range timers {
			if len(byKey[key]) != 1 {
				t.Errorf("%s: timer %s: %d timer.fired events on the bus under its key, want 1", b.name, key, len(byKey[key]))
			}
			timerEvents += len(byKey[key])
		}
		if missing > 0 {
			t.Errorf("%s: %d of the %d events of acknowledged orders are not on the bus", b.name, missing, checked)
		}
		t.Logf("%s: %d messages: every one of the %d events of %d acknowledged orders and %d timer.fired events present; %d duplicates", b.name, len(got), checked, len(acked), timerEvents, dup)
	}
}

// sinkMetrics returns the event sink lines of a process's /metrics.
func sinkMetrics(t *testing.T, base string) string {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "hourglass_event_sink_") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// eventsByID reads every event of the database, by order or timer id.
func eventsByID(t *testing.T, dbURL, dataDir string) map[int64][]hourglass.EventRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := store.Open(ctx, store.Options{URL: dbURL, DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return eventLog(t, db)
}

// eventLog reads every event of db in pages of the event log (not one
// query per id: 10,000 of those took 13 s on MariaDB), by order or timer
// id.
func eventLog(t *testing.T, db hourglass.Database) map[int64][]hourglass.EventRecord {
	t.Helper()
	log := db.(hourglass.EventLog)
	out := map[int64][]hourglass.EventRecord{}
	for after := int64(0); ; {
		page, err := log.Events(t.Context(), hourglass.EventPage{After: after, Limit: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		for _, e := range page {
			out[e.OrderID] = append(out[e.OrderID], e)
		}
		after = page[len(page)-1].Seq
	}
}

// sinkBuses returns a destination on every broker the machine has, each
// named for this test and deleted after it: Kafka on a kfake started here
// (as delay/kafka's tests do), RabbitMQ, NATS and Redis on loopback (each
// skipped when absent, failed under CI=true).
func sinkBuses(t *testing.T) []bus {
	name := "hgsinkcrash_" + strconv.FormatUint(rand.Uint64()&(1<<40-1), 16)
	var out []bus

	// Kafka: kfake in this process, on a port of its own.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(cluster.Close)
	kaddr := cluster.ListenAddrs()[0]
	out = append(out, bus{name: "kafka", url: "kafka://" + kaddr + "/" + name, read: func(t *testing.T) []busMsg {
		cl, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics(name), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		var got []busMsg
		for idle := 0; idle < 3; {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			fs := cl.PollFetches(ctx)
			cancel()
			n := 0
			fs.EachRecord(func(r *kgo.Record) {
				n++
				m := busMsg{key: string(r.Key)}
				for _, h := range r.Headers {
					if h.Key == "id" {
						m.id = string(h.Value)
					}
				}
				got = append(got, m)
			})
			if n == 0 {
				idle++
			}
		}
		return got
	}})

	if u := serviceURL(t, "RabbitMQ", "HOURGLASS_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/"); u != "" {
		conn, err := amqpgo.Dial(u)
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.ExchangeDeclare(name, "topic", true, false, false, false, nil)
		}
		if err == nil {
			_, err = ch.QueueDeclare(name, true, false, false, false, nil)
		}
		if err == nil {
			err = ch.QueueBind(name, "#", name, false, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ch.QueueDelete(name, false, false, false)
			ch.ExchangeDelete(name, false, false)
			conn.Close()
		})
		var got []busMsg
		out = append(out, bus{name: "rabbitmq", url: strings.TrimSuffix(u, "/") + "/" + name, read: func(t *testing.T) []busMsg {
			for {
				m, ok, err := ch.Get(name, true)
				if err != nil {
					t.Fatal(err)
				}
				if !ok {
					return got
				}
				key, _ := m.Headers["key"].(string)
				got = append(got, busMsg{id: m.MessageId, key: key})
			}
		}})
	}

	if u := serviceURL(t, "NATS", "HOURGLASS_TEST_NATS_URL", "nats://127.0.0.1:4222"); u != "" {
		nc, err := natsgo.Connect(u)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		subject := "hourglass.crash." + name
		stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { js.DeleteStream(context.Background(), name); nc.Close() })
		out = append(out, bus{name: "nats", url: strings.TrimSuffix(u, "/") + "/" + subject, read: func(t *testing.T) []busMsg {
			info, err := stream.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var got []busMsg
			for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
				m, err := stream.GetMsg(t.Context(), seq)
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, busMsg{id: m.Header.Get("id"), key: m.Header.Get("key")})
			}
			return got
		}})
	}

	if u := serviceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"); u != "" {
		opt, err := goredis.ParseURL(u)
		if err != nil {
			t.Fatal(err)
		}
		rdb := goredis.NewClient(opt)
		t.Cleanup(func() { rdb.Del(context.Background(), name); rdb.Close() })
		out = append(out, bus{name: "redis", url: u + "?stream=" + url.QueryEscape(name), read: func(t *testing.T) []busMsg {
			return readStream(t, rdb, name)
		}})
	}
	return out
}

// serviceURL is testenv.ServiceURL for one broker among several: "" (and a
// log line) when it is absent, so the others still run; under CI=true an
// absent broker fails the test.
func serviceURL(t *testing.T, name, env, def string) string {
	raw := os.Getenv(env)
	if raw == "" {
		raw = def
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("%s=%q: %v", env, raw, err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not reachable at %s: %v", name, u.Host, err)
		}
		t.Logf("%s is not reachable at %s (%v): its sink is left out; set %s", name, u.Host, err, env)
		return ""
	}
	conn.Close()
	return raw
}
