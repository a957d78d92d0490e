package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/kafka"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// defaultURL is delay.KafkaURLDefault, not imported so that this package's
// tests do not build every other mechanism.
const defaultURL = "kafka://127.0.0.1:9092"

// brokerURL returns the Kafka to test against: the one named by
// HOURGLASS_TEST_KAFKA_URL when it is set, else a kfake cluster (franz-go's
// in-process Kafka) started for this test and closed after it.
func brokerURL(t *testing.T) string {
	t.Helper()
	if os.Getenv("HOURGLASS_TEST_KAFKA_URL") != "" {
		return testenv.ServiceURL(t, "Kafka", "HOURGLASS_TEST_KAFKA_URL", defaultURL)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return "kafka://" + strings.Join(c.ListenAddrs(), ",")
}

// cleaner deletes the topics and groups of each namespace once, after every
// scheduler of that namespace closed (cleanups run last-in first-out, and
// the first scheduler of a namespace registers the deletion). A kfake
// cluster needs none: it goes away with its test.
type cleaner struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (c *cleaner) register(t *testing.T, url, ns string) {
	if os.Getenv("HOURGLASS_TEST_KAFKA_URL") == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	if c.seen[ns] {
		return
	}
	c.seen[ns] = true
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(strings.TrimPrefix(url, "kafka://"), ",")...))
		if err != nil {
			return
		}
		defer cl.Close()
		adm := kadm.NewClient(cl)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := adm.DeleteGroups(ctx, kafka.Groups(ns)...); err != nil {
			t.Logf("delete groups of %s: %v", ns, err)
		}
		if _, err := adm.DeleteTopics(ctx, kafka.Topics(ns)...); err != nil {
			t.Logf("delete topics of %s: %v", ns, err)
		}
	})
}

func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func open(t *testing.T, url, ns string, cl *cleaner) *kafka.Scheduler {
	t.Helper()
	testenv.RequireDefault(t)
	cl.register(t, url, ns)
	s, err := kafka.Open(context.Background(), kafka.Config{URL: url, Namespace: ns, Partitions: 4, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	var cl cleaner
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, ns string) hourglass.Scheduler { return open(t, url, ns, &cl) },
		// The suite's default bound (3 s): a broken mechanism is later than
		// that, and lateness itself is measured by hourglass bench. Against
		// the in-process kfake, under go test -race ./... on 2 cores, whole
		// batches came 1-2.5 s late in CI (FiresOnceNeverEarly,
		// OwnersShareThePartitions), and on time when run alone.
	})
}

// TestForwardsThroughTiers schedules timers long enough to travel through
// the coarse tiers (10s, 1s) and checks that they fire on time, never early,
// and that the coarse topics carried them.
func TestForwardsThroughTiers(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	ns := hourglasstest.Namespace(t)
	s := open(t, url, ns, &cleaner{})
	start := time.Now()
	var timers []hourglass.DueItem
	for i, d := range []time.Duration{1500 * time.Millisecond, 2300 * time.Millisecond, 3100 * time.Millisecond, 11 * time.Second, 12700 * time.Millisecond} {
		timers = append(timers, hourglass.DueItem{ID: int64(i + 1), At: start.Add(d).Truncate(time.Millisecond)})
	}
	if err := s.Schedule(context.Background(), timers); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[int64]time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(_ context.Context, due []hourglass.DueItem) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, tm := range due {
				if now.Before(tm.At) {
					t.Errorf("order %d delivered %s early", tm.ID, tm.At.Sub(now))
				}
				if _, ok := got[tm.ID]; !ok {
					got[tm.ID] = now
				}
			}
			return nil
		})
	}()
	testenv.Eventually(t, 25*time.Second, "every timer delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(timers)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, tm := range timers {
		late := got[tm.ID].Sub(tm.At)
		t.Logf("order %d (delay %s): %s late", tm.ID, tm.At.Sub(start).Round(time.Millisecond), late)
		// In go test -race ./... on 2 cores (CI, 2026-12-06) the 1.5 s
		// timer once came 1.13 s late and the 3.1 s one 868 ms, while the
		// 11 s and 12.7 s ones, through the tiers, came within 6 ms: a
		// tier that lost a timer makes it 10 s late.
		limit := 2 * time.Second
		if late > limit {
			t.Errorf("order %d delivered %s late", tm.ID, late)
		}
	}
	// The coarse topics carried them: 1s and 10s were written to.
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(strings.TrimPrefix(url, "kafka://"), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), kafka.Topics(ns)...)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range kafka.Topics(ns)[:3] {
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic == topic {
				n += o.Offset
			}
		})
		t.Logf("%s: %d records", topic, n)
		if n == 0 {
			t.Errorf("no record went through %s", topic)
		}
	}
}

// TestOpenFailsWithoutBroker checks the start-up error when nothing listens.
func TestOpenFailsWithoutBroker(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = kafka.Open(context.Background(), kafka.Config{URL: "kafka://" + addr, Timeout: 2 * time.Second, Logger: quietLogger()})
	want := fmt.Sprintf("kafka: no Kafka broker reachable at %s: ", addr)
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Open = %v, want one line starting %q", err, want)
	}
	t.Log(err)
}

// TestRunFailsWhenBrokerGoes checks that Run returns an error, not hangs,
// when the broker goes away while it runs.
func TestRunFailsWhenBrokerGoes(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	url := "kafka://" + strings.Join(c.ListenAddrs(), ",")
	s := open(t, url, hourglasstest.Namespace(t), &cleaner{})
	done := make(chan error, 1)
	// Run is running once it fetches (a control function that observes,
	// not handles, stays for every fetch).
	var fetched sync.Once
	fetching := make(chan struct{})
	c.ControlKey(kmsg.Fetch.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		fetched.Do(func() { close(fetching) })
		return nil, nil, false
	})
	go func() {
		done <- s.Run(context.Background(), func(context.Context, []hourglass.DueItem) error { return nil })
	}()
	select {
	case <-fetching:
	case err := <-done:
		t.Fatalf("Run returned before it fetched: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fetch within 30 s")
	}
	c.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Run returned nil after the broker went away")
		}
		t.Logf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of the broker going away")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 1, At: time.Now().Add(time.Minute)}}); err == nil {
		t.Fatal("Schedule succeeded with no broker")
	}
}

// TestDrainsTheLegacyFinestTier: timers written by a version before
// ownership to its finest tier ("<ns>.delay.due", shared by a consumer
// group) still fire after an upgrade: Open finds the topic and Run forwards
// its records to the owned tier, whose owner delivers them on time.
func TestDrainsTheLegacyFinestTier(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	ns := hourglasstest.Namespace(t)
	var cln cleaner
	cln.register(t, url, ns)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(strings.TrimPrefix(url, "kafka://"), ",")...), kgo.DefaultProduceTopic(ns+".delay.due"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 3, -1, nil, ns+".delay.due"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.DeleteTopics(context.Background(), ns+".delay.due") })
	start := time.Now()
	want := map[int64]time.Time{}
	for i := range 50 {
		id, deadline := int64(i+1), start.Add(800*time.Millisecond+time.Duration(i)*10*time.Millisecond).Truncate(time.Millisecond)
		want[id] = deadline
		// The text form of a one-timer record of the older versions.
		v := fmt.Sprintf("v1 %d %d %d", id, deadline.UnixMilli(), deadline.UnixMilli())
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	s := open(t, url, ns, &cln)
	s.Own(hourglass.Parts{}) // owns nothing yet: the drain still forwards
	var mu sync.Mutex
	got := map[int64]time.Time{}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.Run(runCtx, func(_ context.Context, due []hourglass.DueItem) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, tm := range due {
				if now.Before(tm.At) {
					t.Errorf("order %d delivered %s early", tm.ID, tm.At.Sub(now))
				}
				got[tm.ID] = now
			}
			return nil
		})
	}()
	// The drain forwards with nothing owned: it commits every legacy
	// record (50 over the topic's partitions) before anything is owned.
	testenv.EventuallyEvery(t, 20*time.Second, 20*time.Millisecond, "the legacy topic drained (its group's offsets committed to the end)", func() bool {
		offs, err := adm.FetchOffsets(ctx, ns+".delay.due.group")
		if err != nil {
			return false
		}
		var committed int64
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Topic == ns+".delay.due" && o.Err == nil && o.At > 0 {
				committed += o.At
			}
		})
		return committed == int64(len(want))
	})
	s.Own(nil) // now every partition
	testenv.Eventually(t, 20*time.Second, "every timer delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(want)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestOpenRefusesAnOwnedTopicOfAnotherSize: the finest tier's topic must
// have one partition per hourglass partition; Open says so and how to fix it.
func TestOpenRefusesAnOwnedTopicOfAnotherSize(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	ns := hourglasstest.Namespace(t)
	var cln cleaner
	cln.register(t, url, ns)
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(strings.TrimPrefix(url, "kafka://"), ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	owned := kafka.Topics(ns)[0]
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 8, -1, nil, owned); err != nil {
		t.Fatal(err)
	}
	_, err = kafka.Open(context.Background(), kafka.Config{URL: url, Namespace: ns, Logger: quietLogger()})
	want := fmt.Sprintf("kafka: topic %s has 8 partitions, want %d", owned, hourglass.Partitions)
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Open = %v, want an error starting %q", err, want)
	}
}

// TestPackedBurstWithAFailedDelivery schedules 1,000 timers in one call, so
// they travel packed (a few records of up to 256), and fails one Deliver:
// every timer is delivered, none early, and Run keeps going.
func TestPackedBurstWithAFailedDelivery(t *testing.T) {
	t.Parallel()
	url := brokerURL(t)
	s := open(t, url, hourglasstest.Namespace(t), &cleaner{})
	start := time.Now()
	timers := make([]hourglass.DueItem, 1000)
	for i := range timers {
		// Spread over 1.5..2.5 s: through the 1s tier, then the finest.
		timers[i] = hourglass.DueItem{ID: int64(i + 1), At: start.Add(1500*time.Millisecond + time.Duration(i)*time.Millisecond).Truncate(time.Millisecond)}
	}
	if err := s.Schedule(context.Background(), timers); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		got   = map[int64]bool{}
		calls int
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(_ context.Context, due []hourglass.DueItem) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			if calls++; calls == 2 {
				return errors.New("store down")
			}
			for _, tm := range due {
				if now.Before(tm.At) {
					t.Errorf("order %d delivered %s early", tm.ID, tm.At.Sub(now))
				}
				got[tm.ID] = true
			}
			return nil
		})
	}()
	testenv.Eventually(t, 30*time.Second, "every timer delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(timers)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
