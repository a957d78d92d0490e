package node_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/engine"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/mysql/mytest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/hourglass/hourglass/txtimer"
)

// BenchmarkArmTimers measures arming b.N timers an hour ahead on one node,
// by 16 clients, in two ways on the same database and node: through PUT
// /v1/timers/{key} (lag: the request's round trip, its commit included)
// and through timer requests written in the shop's own transactions (lag:
// from the shop's commit to the commit that applied the request, read as
// the timer's updated_at, the database server's clock on this machine).
// It reports arms/s and the lag's p50 and p99. HOURGLASS_TEST_STORE picks
// postgres (default; hourglass in its own schema) or mysql.
//
//	go test -run '^$' -bench ArmTimers -benchtime 20000x ./node/
//	HOURGLASS_TEST_STORE=mysql go test -run '^$' -bench ArmTimers -benchtime 20000x ./node/
func BenchmarkArmTimers(b *testing.B) {
	kind := testenv.Store(b, store.KindPostgres)
	var (
		dbURL, schema, qual string
		shop                *sql.DB
		dialect             txtimer.Dialect
	)
	switch kind {
	case store.KindPostgres:
		dbURL, schema, qual, dialect = pgtest.NewDatabase(b), "hourglass", "hourglass.", txtimer.Postgres
		var err error
		if shop, err = sql.Open("pgx", dbURL); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { shop.Close() })
	case store.KindMySQL:
		dbURL, dialect = mytest.NewDatabase(b), txtimer.MySQL
		u, err := url.Parse(dbURL)
		if err != nil {
			b.Fatal(err)
		}
		qual, shop = strings.TrimPrefix(u.Path, "/")+".", mytest.Admin(b, dbURL)
		shop.SetMaxOpenConns(32)
	default:
		b.Skipf("HOURGLASS_TEST_STORE=%s: want postgres or mysql", kind)
	}
	shop.SetMaxIdleConns(32)
	n, err := node.New(context.Background(), node.Config{
		Addr:     "127.0.0.1:0",
		Store:    store.Options{URL: dbURL, Schema: schema},
		Engine:   engine.Config{Window: time.Minute},
		TimerMax: 10_000_000,
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	b.Cleanup(func() { stop(); <-done; n.Close() })
	table := txtimer.Table{Name: qual + "timer_requests", Dialect: dialect}
	const clients = 16

	run := func(b *testing.B, prefix string, arm func(key string) (time.Duration, error)) []time.Duration {
		var (
			next atomic.Int64
			mu   sync.Mutex
			lags []time.Duration
			wg   sync.WaitGroup
			errs atomic.Int64
		)
		b.ResetTimer()
		for range clients {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
					lag, err := arm(fmt.Sprintf("%s-%d", prefix, i))
					if err != nil {
						errs.Add(1)
						continue
					}
					if lag >= 0 {
						mu.Lock()
						lags = append(lags, lag)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if e := errs.Load(); e > 0 {
			b.Fatalf("%d arms failed", e)
		}
		return lags
	}
	report := func(b *testing.B, lags []time.Duration, elapsed time.Duration) {
		slices.Sort(lags)
		b.ReportMetric(float64(b.N)/elapsed.Seconds(), "arms/s")
		if len(lags) > 0 {
			b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "lag-p50-ms")
			b.ReportMetric(float64(lags[(len(lags)-1)*99/100].Microseconds())/1000, "lag-p99-ms")
		}
	}

	client := api.NewClient("http://"+n.Addr().String(), "", nil)
	b.Run("put", func(b *testing.B) {
		fireAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
		start := time.Now()
		lags := run(b, fmt.Sprintf("put%d", b.N), func(key string) (time.Duration, error) {
			t0 := time.Now()
			_, _, err := client.ArmTimer(context.Background(), key, api.ArmTimerRequest{FireAt: fireAt})
			return time.Since(t0), err
		})
		report(b, lags, time.Since(start))
	})
	b.Run("requests", func(b *testing.B) {
		fireAt := time.Now().Add(time.Hour)
		prefix := fmt.Sprintf("req%d", b.N)
		var (
			mu        sync.Mutex
			committed = make(map[string]time.Time, b.N)
		)
		start := time.Now()
		run(b, prefix, func(key string) (time.Duration, error) {
			tx, err := shop.BeginTx(context.Background(), nil)
			if err != nil {
				return 0, err
			}
			if err := table.Arm(context.Background(), tx, txtimer.Arm{Key: key, FireAt: fireAt}); err != nil {
				tx.Rollback()
				return 0, err
			}
			if err := tx.Commit(); err != nil {
				return 0, err
			}
			mu.Lock()
			committed[key] = time.Now()
			mu.Unlock()
			return -1, nil
		})
		// Applied: every request gone.
		testenv.EventuallyEvery(b, 10*time.Minute, 5*time.Millisecond, "every request applied (its row gone)", func() bool {
			var left int
			if err := shop.QueryRow("SELECT count(*) FROM " + table.Name).Scan(&left); err != nil {
				b.Fatal(err)
			}
			return left == 0
		})
		elapsed := time.Since(start)
		b.StopTimer()
		var (
			rows *sql.Rows
			err  error
		)
		if dialect == txtimer.Postgres {
			rows, err = shop.Query(`SELECT key, updated_at FROM `+qual+`timers WHERE key LIKE $1`, prefix+"-%")
		} else {
			rows, err = shop.Query("SELECT timer_key, updated_at FROM "+qual+"timers WHERE timer_key LIKE ?", prefix+"-%")
		}
		if err != nil {
			b.Fatal(err)
		}
		var lags []time.Duration
		for rows.Next() {
			var key string
			var updated int64
			if err := rows.Scan(&key, &updated); err != nil {
				b.Fatal(err)
			}
			// The commit's clock is this process's, updated_at the
			// server's on the same machine; a whole millisecond each.
			lags = append(lags, max(time.UnixMilli(updated).Sub(committed[key]), 0))
		}
		if len(lags) != b.N {
			b.Fatalf("%d timers armed by requests, want %d", len(lags), b.N)
		}
		report(b, lags, elapsed)
	})
}
