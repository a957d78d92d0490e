package node

import (
	"context"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// forgedNoticesEnv sets how many forged notices TestForgedNotices sends on
// each channel: 20,000 by default (CI); the README's long run is
// HOURGLASS_FORGED_NOTICES=1000000.
const forgedNoticesEnv = "HOURGLASS_FORGED_NOTICES"

// TestForgedNotices: a role created with nothing but LOGIN (CONNECT is
// PUBLIC's) floods every channel a node LISTENs on with forged notices
// while orders fall due: created-orders notices naming each victim order
// with its deadline 2 s later, unreadable ones, and payloads on the
// payload-less deliveries and requests channels. No order closes more than
// 50 ms late, the process's RSS grows by less than 50 MB, the log gains
// a few lines, not one per notice, and hourglass_notices_rejected_total
// counts them. (Before: a victim closed 2 s late, and a million notices
// took a node from 36 to 204 MB, 11,000 transactions and 14,662 WARN
// lines.)
func TestForgedNotices(t *testing.T) {
	perChannel := testenv.PositiveInt(t, forgedNoticesEnv, 20_000)
	// lateBound: the 50 ms is judged in the documented full run
	// (the env set), on a machine doing nothing else. The default run goes
	// in go test -race ./... beside other packages on 2 cores, where a
	// close can be tens of milliseconds late with no notice at all; its
	// bound still fails a forged notice that moves a deadline (by 2 s).
	lateBound := 500 * time.Millisecond
	if os.Getenv(forgedNoticesEnv) != "" {
		lateBound = 50 * time.Millisecond
	}
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	var logs lockedBuffer
	n, err := New(ctx, Config{
		Addr:     "127.0.0.1:0",
		Store:    store.Options{URL: url},
		Engine:   engine.Config{SweepInterval: time.Second, SweepGrace: time.Second},
		TimerMax: 1000,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	RunInTest(t, n)
	testenv.Eventually(t, 30*time.Second, "the node ready", func() bool { return n.Engine.Ready() })
	channels := n.Store.(interface{ Channels() []string }).Channels()
	if _, err := n.Store.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 1 << 30}); err != nil {
		t.Fatal(err)
	}

	// The forger: LOGIN only.
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	role := "forger_" + strings.ToLower(strconv.FormatInt(time.Now().UnixNano()%1e9, 36))
	if _, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), "DROP ROLE "+role) })
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	forger, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close(ctx)
	if _, err := forger.Exec(ctx, "SELECT count(*) FROM orders"); err == nil {
		t.Fatal("the forger can read hourglass's orders: not a CONNECT-only role")
	}

	// Victims fall due from 1 s after the flood begins, 25 ms apart for
	// each 100,000 notices a channel (the flood's pace here, about).
	start := time.Now()
	var victims []hourglass.Order
	spacing := 25 * time.Millisecond * time.Duration(max(1, perChannel/100_000))
	for i := range 40 {
		o, _, err := n.Store.CreateOrder(ctx, hourglass.CreateOrderParams{UserID: "victim", Items: []hourglass.Item{{SKU: "A", Quantity: 1}},
			Timeout: time.Second + time.Duration(i)*spacing})
		if err != nil {
			t.Fatal(err)
		}
		victims = append(victims, o)
	}
	ids, deadlines := make([]string, len(victims)), make([]string, len(victims))
	for i, o := range victims {
		ids[i], deadlines[i] = strconv.FormatInt(o.ID, 10), strconv.FormatInt(hourglass.UnixMilli(o.Deadline)+2000, 10)
	}

	runtime.GC()
	baseCPU := cpuTime()
	baseRSS := testenv.RSS(t)
	baseLines := strings.Count(logs.String(), "\n")
	var peakRSS atomic.Int64
	peakRSS.Store(baseRSS)
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			if r := testenv.RSS(t); r > peakRSS.Load() {
				peakRSS.Store(r)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// One DO block, committing every 10,000 rounds (a transaction's
	// notices are delivered at its commit; identical ones in one are
	// merged, so each payload differs). Unreadable notices only in the
	// first tenth: they made the old code reload, which undid the moves.
	flood := fmt.Sprintf(`DO $$
DECLARE
	ids bigint[] := ARRAY[%s];
	deadlines bigint[] := ARRAY[%s];
	k int;
BEGIN
	FOR i IN 1..%d LOOP
		k := 1 + i %% %d;
		IF i <= %d AND i %% 10 = 0 THEN
			PERFORM pg_notify(%s, 'garbage ' || i);
		ELSE
			PERFORM pg_notify(%s, 'forger' || i || '|' || ids[k] || ':' || deadlines[k]);
		END IF;
		PERFORM pg_notify(%s, 'd' || i);
		PERFORM pg_notify(%s, 'r' || i);
		IF i %% 10000 = 0 THEN
			PERFORM pg_notify(%s, '');
			PERFORM pg_notify(%s, '');
			COMMIT;
		END IF;
	END LOOP;
END $$`, strings.Join(ids, ","), strings.Join(deadlines, ","), perChannel, len(victims), perChannel/10,
		literal(channels[1]), literal(channels[1]), literal(channels[0]), literal(channels[2]), literal(channels[0]), literal(channels[2]))
	if _, err := forger.Exec(ctx, flood); err != nil {
		t.Fatalf("the flood: %v", err)
	}
	t.Logf("%d forged notices on each of %d channels sent in %s", perChannel, len(channels), time.Since(start).Round(time.Millisecond))
	defer func() {
		t.Logf("this process's CPU time during the flood and the closes: %s", (cpuTime() - baseCPU).Round(time.Millisecond))
	}()

	var worst time.Duration
	for _, v := range victims {
		o := await(t, n, v.ID, "closed", func(o hourglass.Order) bool { return o.Status == hourglass.StateClosed })
		late := o.ClosedAt.Sub(v.Deadline)
		worst = max(worst, late)
		if late > lateBound {
			t.Errorf("order %d closed %s late (deadline %s)", v.ID, late, v.Deadline.Format(hourglass.TimeFormat))
		}
	}
	// Every notice read: each one on the deliveries and requests channels
	// carried a payload, so each is counted.
	testenv.EventuallyEvery(t, 5*time.Minute, 250*time.Millisecond, "every forged notice read", func() bool {
		m := scrape(t, n)
		return rejected(m, "deliveries") == perChannel && rejected(m, "requests") == perChannel
	})
	stopSampling()
	<-sampled
	grown := peakRSS.Load() - baseRSS
	lines := strings.Count(logs.String(), "\n") - baseLines
	t.Logf("worst lateness %s; RSS %d MB, peak +%.1f MB; %d log lines", worst, baseRSS>>20, float64(grown)/(1<<20), lines)
	if grown > 50<<20 {
		t.Errorf("RSS grew by %.1f MB under the flood; want under 50 MB", float64(grown)/(1<<20))
	}
	if lines > 50 {
		t.Errorf("the log gained %d lines under %d forged notices; want a few:\n%s", lines, 3*perChannel, tail(logs.String(), 20))
	}
	metrics := scrape(t, n)
	if got, want := rejected(metrics, "created"), perChannel/100; got != want {
		t.Errorf("%d unreadable created-orders notices counted, want %d:\n%s", got, want, grep(metrics, "notices_rejected"))
	}
}

// rejected returns hourglass_notices_rejected_total{channel} in a scrape
// (-1: absent).
func rejected(metrics, channel string) int {
	for line := range strings.SplitSeq(metrics, "\n") {
		if v, ok := strings.CutPrefix(line, `hourglass_notices_rejected_total{channel="`+channel+`"} `); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return int(f)
		}
	}
	return -1
}

// literal quotes s as an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tail returns the last n lines of text.
func tail(text string, n int) string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
