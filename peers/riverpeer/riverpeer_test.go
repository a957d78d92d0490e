package riverpeer

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
)

// TestScheduler runs the conformance suite on River at its tuned settings.
// River's lateness (its job scheduler makes jobs available every 5 s, so a
// timer due sooner than that may wait for the next pass) is the point of
// the comparison, not a defect: the suite's limit is set high and what it
// measures is logged.
func TestScheduler(t *testing.T) {
	url := hourglasstest.ServiceURL(t, "PostgreSQL", "HOURGLASS_TEST_POSTGRES_URL", URLDefault)
	var mu sync.Mutex
	schemas := map[string]bool{}
	hourglasstest.ExerciseScheduler(t, hourglasstest.SchedulerHarness{
		New: func(t *testing.T, ns string) hourglass.Scheduler {
			schema := schemaFor(ns)
			cfg := Tuned(url, schema)
			cfg.ShutdownTimeout = time.Second // the suite kills a consumer mid-batch
			cfg.MaxConns = 8                  // two consumers on a shared machine
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
			s, err := Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			first := !schemas[schema]
			schemas[schema] = true
			mu.Unlock()
			if first {
				// Registered before the scheduler's own Close, so it runs
				// after every scheduler on the schema has closed.
				t.Cleanup(func() { dropSchema(t, url, schema) })
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		// The suite's timers are due 0.3 s to 1.5 s after they are inserted:
		// up to a 5 s scheduler pass late, plus its start-up stagger (up to
		// 1 s), leader election and the load of the test.
		MaxLateness: 10 * time.Second,
		Redelivery:  10 * time.Second,
	})
}

// schemaFor maps a test namespace to a schema name: its end, which holds
// the unique part, within River's 46 bytes.
func schemaFor(ns string) string {
	s := strings.ToLower(strings.ReplaceAll(ns, "-", "_"))
	if len(s) > 46 {
		s = s[len(s)-46:]
	}
	if s[0] >= '0' && s[0] <= '9' {
		s = "_" + s[1:]
	}
	return s
}

func dropSchema(t *testing.T, url, schema string) {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	s, err := Open(context.Background(), Config{URL: url, Schema: schema, DropOnClose: true, Logger: quiet})
	if err != nil {
		t.Logf("drop schema %s: %v", schema, err)
		return
	}
	if err := s.Close(); err != nil {
		t.Logf("drop schema %s: %v", schema, err)
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	b := backoff{first: 500 * time.Millisecond, max: 5 * time.Second}
	for _, tc := range []struct {
		errors int // recorded before the failing attempt
		want   time.Duration
	}{{0, 500 * time.Millisecond}, {1, time.Second}, {3, 4 * time.Second}, {4, 5 * time.Second}, {100, 5 * time.Second}} {
		job := &rivertype.JobRow{Errors: make([]rivertype.AttemptError, tc.errors)}
		before := time.Now()
		got := b.NextRetry(job).Sub(before)
		if got < tc.want || got > tc.want+time.Second {
			t.Errorf("after %d errors: retry in %s, want %s", tc.errors, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero is the defaults", Config{}, true},
		{"tuned", Tuned("", "s"), true},
		{"schema with a dash", Config{Schema: "a-b"}, false},
		{"schema in capitals", Config{Schema: "River"}, false},
		{"schema of 46 bytes", Config{Schema: strings.Repeat("s", 46)}, true},
		{"schema longer than River allows", Config{Schema: strings.Repeat("s", 47)}, false},
		{"cooldown below River's minimum", Config{FetchCooldown: time.Microsecond}, false},
		{"too many workers", Config{MaxWorkers: 10001}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
