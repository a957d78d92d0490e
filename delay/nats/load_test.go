package nats_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/delay/nats"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestSteadyFarTimers measures the case that stalls a naive NakWithDelay
// consumer on NATS 2.9: a steady 400 timers/s for 10 s, each due 15–20 s
// later (beyond the hold window, so each is handed back once with a
// delay). It logs the lateness percentiles; it fails only on a lost, early
// or duplicated timer, or one later than the sweeper's grace (2 s). It runs
// for about 35 s, so only with HOURGLASS_TEST_NATS_LOAD=1; with
// HOURGLASS_TEST_NATS_SCHEDULES(_URL) it also runs on a 2.12+ server.
func TestSteadyFarTimers(t *testing.T) {
	if os.Getenv("HOURGLASS_TEST_NATS_LOAD") != "1" {
		t.Skip("a 35 s measurement; set HOURGLASS_TEST_NATS_LOAD=1")
	}
	t.Run("Debian", func(t *testing.T) { measureSteadyFarTimers(t, serverURL(t)) })
	t.Run("MsgSchedules", func(t *testing.T) { measureSteadyFarTimers(t, schedulesServerURL(t)) })
}

func measureSteadyFarTimers(t *testing.T, url string) {
	const rate, seconds = 400, 10
	s := open(t, url, hourglasstest.Namespace(t), nats.Config{})
	rec := newRecorder()
	stop := runWith(t, s, rec)
	var timers []hourglass.DueItem
	tick := time.NewTicker(100 * time.Millisecond)
	for i := range seconds * 10 {
		<-tick.C
		batch := make([]hourglass.DueItem, rate/10)
		for j := range batch {
			id := int64(i*len(batch) + j + 1)
			batch[j] = hourglass.DueItem{ID: id, At: time.Now().Add(15*time.Second + time.Duration(id%5000)*time.Millisecond).Truncate(time.Millisecond)}
		}
		if err := s.Schedule(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		timers = append(timers, batch...)
	}
	tick.Stop()
	rec.wait(t, len(timers), 40*time.Second)
	testenv.Phase(t, 500*time.Millisecond, "Run goes on: a duplicate would show")
	stop()
	rec.mu.Lock()
	var late []time.Duration
	for _, tm := range timers {
		late = append(late, rec.first[tm.ID].Sub(tm.At))
	}
	rec.mu.Unlock()
	slices.Sort(late)
	t.Logf("msg schedules %v: %d timers at %d/s, lateness p50 %s p99 %s max %s", s.MsgSchedules(), len(timers), rate, late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
	rec.check(t, timers, 2*time.Second)
}
