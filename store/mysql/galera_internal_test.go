package mysql

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/hourglass/hourglass/store/mysql/galeratest"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
)

// TestGaleraLeaseLockExcludes: processes taking the migration lock at once
// on the three nodes hold it one at a time (GET_LOCK would let one process
// per node in), and the lease passes from each to the next.
func TestGaleraLeaseLockExcludes(t *testing.T) {
	t.Parallel()
	urls := galeratest.NewDatabase(t)
	const perNode, rounds = 3, 3
	var (
		wg        sync.WaitGroup
		holders   atomic.Int32
		taken     atomic.Int32
		conflicts atomic.Int32
		start     = make(chan struct{})
	)
	for i := range perNode * len(urls) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			cfg := Config{URL: urls[i%len(urls)], MaxConns: 2, ObserveRetry: func(string) { conflicts.Add(1) }}
			db, _, err := connect(ctx, cfg)
			if err != nil {
				t.Error(err)
				return
			}
			defer db.Close()
			mc, _ := myurl.Parse(cfg.URL)
			tg, err := newTarget(ctx, db, mc.DBName)
			if err != nil {
				t.Error(err)
				return
			}
			defer tg.conn.Close()
			if !tg.galera {
				t.Error("newTarget did not see a Galera node")
				return
			}
			tg.observe = cfg.ObserveRetry
			<-start
			for range rounds {
				unlock, err := tg.Lock(ctx)
				if err != nil {
					t.Errorf("node %d: lock: %v", i%len(urls)+1, err)
					return
				}
				if n := holders.Add(1); n != 1 {
					t.Errorf("%d processes hold the migration lock at once", n)
				}
				taken.Add(1)
				// Hold it a while: a second holder would show in holders
				// meanwhile, and nothing signals one that never came.
				time.Sleep(5 * time.Millisecond)
				holders.Add(-1)
				if err := unlock(); err != nil {
					t.Errorf("unlock: %v", err)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := taken.Load(); got != perNode*int32(len(urls))*rounds {
		t.Fatalf("the lock was taken %d times, want %d", got, perNode*len(urls)*rounds)
	}
	t.Logf("%d takes, %d lost certifications or deadlocks on the lease row", taken.Load(), conflicts.Load())
}

func TestRetryReason(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		number uint16
		galera bool
		want   string
	}{
		{1213, false, RetryDeadlock},
		{1213, true, RetryCertification},
		{1205, true, RetryLockTimeout},
		{1062, false, RetryDuplicateKey},
		{1020, false, RetrySerialization},
		{1047, true, ""}, // not in the primary component: unavailable, not a race
		{1146, false, ""},
	} {
		err := fmt.Errorf("wrapped: %w", &gomysql.MySQLError{Number: tt.number})
		if got := retryReason(err, tt.galera); got != tt.want {
			t.Errorf("retryReason(%d, galera=%v) = %q, want %q", tt.number, tt.galera, got, tt.want)
		}
	}
	if got := retryReason(errors.New("other"), true); got != "" {
		t.Errorf("retryReason(a non-MySQL error) = %q", got)
	}
	if !isConnLost(&gomysql.MySQLError{Number: 1047}) {
		t.Error("error 1047 (a Galera node out of the primary component) is not unavailable")
	}
}
