package eventsink_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/eventsink"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// memSink keeps what it is given; fail makes Publish fail.
type memSink struct {
	mu   sync.Mutex
	got  []eventsink.Message
	fail bool
}

func (s *memSink) Publish(_ context.Context, msgs []eventsink.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail {
		return fmt.Errorf("memsink: down")
	}
	s.got = append(s.got, msgs...)
	return nil
}

func (s *memSink) Close() error { return nil }

func (s *memSink) setFailing(v bool) { s.mu.Lock(); s.fail = v; s.mu.Unlock() }

func (s *memSink) messages() []eventsink.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// stores opens each store the machine has: SQLite always, PostgreSQL and
// MariaDB on their test servers (skipped when absent, failed under CI=true).
var stores = []struct {
	name string
	url  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return "sqlite://" + t.TempDir() + "/hourglass.db" }},
	{"postgres", func(t *testing.T) string { return pgtest.NewDatabase(t) }},
	{"mysql", func(t *testing.T) string { return mytest.NewDatabase(t) }},
}

// past is a clock two hours behind: the store writes its events there, so
// that a prune with a retention of one hour may take them.
type past struct{}

func (past) Now() time.Time { return time.Now().Add(-2 * time.Hour) }

func openStore(t *testing.T, url string) hourglass.Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := store.Open(ctx, store.Options{URL: url, Clock: past{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// writeOrders creates n orders from 8 writers, pays every third, closes
// every third, and returns their ids.
func writeOrders(t *testing.T, db hourglass.Database, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	if _, err := db.PutProduct(ctx, hourglass.Product{SKU: "MUG-1", Name: "Mug", Category: "physical", Available: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		ids []int64
		wg  sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				o, _, err := db.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "u" + strconv.Itoa(i), Items: []hourglass.Item{{SKU: "MUG-1", Quantity: 1}}, Timeout: time.Hour})
				if err != nil {
					t.Error(err)
					return
				}
				switch i % 3 {
				case 1:
					_, err = db.PayOrder(ctx, o.ID, "pay_"+strconv.Itoa(i))
				case 2:
					_, err = db.CloseOrders(ctx, []int64{o.ID})
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				ids = append(ids, o.ID)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ids
}

// fireTimers arms n timers due at once and fires them; it returns their
// ids by key.
func fireTimers(t *testing.T, db hourglass.Database, prefix string, n int) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	ids := map[string]int64{}
	var all []int64
	for i := range n {
		key := prefix + strconv.Itoa(i)
		tm, _, err := db.ArmTimer(ctx, hourglass.ArmTimerParams{Key: key, Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`)})
		if err != nil {
			t.Fatal(err)
		}
		ids[key] = tm.ID
		all = append(all, tm.ID)
	}
	fired, err := db.FireTimers(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	if len(fired) != n {
		t.Fatalf("fired %d of %d timers", len(fired), n)
	}
	return ids
}

// TestStores runs a Publisher on each store's event log: every event of
// every order, and every timer.fired (keyed by the timer's key), is
// published once, in order per order, with the body webhooks get
// (OrderEvents renders it); the cursors are saved; PruneTimers and
// PruneEvents keep what the sink has not published, and a cursor nobody
// touched within the retention holds nothing.
func TestStores(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			db := openStore(t, st.url(t))
			log, ok := db.(hourglass.EventLog)
			if !ok {
				t.Fatalf("%T is not a hourglass.EventLog", db)
			}
			ids := writeOrders(t, db, 300)
			timers := fireTimers(t, db, "coupon:", 20)
			sink := &memSink{}
			p, err := eventsink.New(eventsink.Config{Name: "mem://test", Sink: sink, Log: log, Poll: 10 * time.Millisecond, Batch: 50, SaveInterval: 10 * time.Millisecond, Settle: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = p.Run(ctx) }()
			want := map[int64][]hourglass.EventRecord{}
			total := 0
			keyOf := map[int64]string{}
			for _, id := range ids {
				keyOf[id] = strconv.FormatInt(id, 10)
			}
			for key, id := range timers {
				ids = append(ids, id)
				keyOf[id] = key // a timer's messages are keyed by its key
			}
			for _, id := range ids {
				evs, err := db.OrderEvents(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				want[id] = evs
				total += len(evs)
			}
			testenv.Eventually(t, 60*time.Second, "every event published", func() bool { return len(sink.messages()) >= total })
			got := map[string][]eventsink.Message{}
			for _, m := range sink.messages() {
				got[m.Key] = append(got[m.Key], m)
			}
			for id, evs := range want {
				ms := got[keyOf[id]]
				if len(ms) != len(evs) {
					t.Errorf("order %d: %d messages, want %d", id, len(ms), len(evs))
					continue
				}
				for i, e := range evs {
					if ms[i].ID != e.ID || ms[i].Type != e.Type || string(ms[i].Body) != string(e.Body) {
						t.Errorf("order %d message %d: %s %s %s, want %s %s %s", id, i, ms[i].ID, ms[i].Type, ms[i].Body, e.ID, e.Type, e.Body)
					}
				}
			}
			if n := len(sink.messages()); n != total {
				t.Errorf("%d messages for %d events", n, total)
			}
			// Every cursor reaches the last event (no gap is left open
			// past Settle).
			last := int64(0)
			for _, evs := range want {
				last = max(last, evs[len(evs)-1].Seq)
			}
			testenv.Eventually(t, 10*time.Second, "the cursors saved at the last event", func() bool {
				cs, err := log.SinkCursors(context.Background(), "mem://test")
				if err != nil || len(cs) != hourglass.Partitions {
					return false
				}
				for _, c := range cs {
					if c.Seq < last {
						return false
					}
				}
				return true
			})

			// The sink goes down: new events wait, and pruning keeps them.
			sink.setFailing(true)
			more := writeOrders(t, db, 30)
			for _, id := range fireTimers(t, db, "seat:", 5) {
				more = append(more, id)
			}
			testenv.Eventually(t, 10*time.Second, "the lag grows", func() bool { return p.Lag() > 0 })
			// A sink removed long ago holds nothing: its cursor was
			// touched before the retention (an hour).
			if err := log.SaveSinkCursors(context.Background(), []hourglass.SinkCursor{{Sink: "gone://", Part: 0, Seq: 0}}, time.Now().Add(-3*time.Hour)); err != nil {
				t.Fatal(err)
			}
			pruned := 0
			for {
				timers, events, err := db.PruneTimers(context.Background(), time.Now().Add(-time.Hour), 1000)
				if err != nil {
					t.Fatal(err)
				}
				pruned += events
				if timers+events == 0 {
					break
				}
			}
			for {
				n, err := db.PruneEvents(context.Background(), time.Now().Add(-time.Hour), 1000)
				if err != nil {
					t.Fatal(err)
				}
				pruned += n
				if n == 0 {
					break
				}
			}
			if pruned != total {
				t.Errorf("PruneEvents pruned %d events, want the %d published (the gone sink's cursor holds none)", pruned, total)
			}
			for _, id := range more {
				evs, err := db.OrderEvents(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if len(evs) == 0 {
					t.Errorf("order %d: its unpublished events were pruned", id)
				}
			}
			sink.setFailing(false)
			testenv.Eventually(t, 30*time.Second, "the lag drains", func() bool { return p.Lag() == 0 && len(sink.messages()) > total })
			cancel()
			<-done
			t.Logf("%d events published, %d pruned once published, %d waited through the outage", total, pruned, len(sink.messages())-total)
		})
	}
}
