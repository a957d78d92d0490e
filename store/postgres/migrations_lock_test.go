package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TestMigrationGivesUpOnALock: a migration that alters events while another
// session's transaction holds a lock on it gives up after its lock_timeout
// with one line naming the migration and the long transaction, instead of
// queuing (and queuing every event write behind it); nothing is applied.
func TestMigrationGivesUpOnALock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	s, err := Open(ctx, Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM events LIMIT 1`); err != nil { // ACCESS SHARE until the end
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	ms = append(ms, migrate.Migration{Version: len(ms) + 1, Name: "events_lock_test", SQL: `ALTER TABLE events ADD COLUMN lock_test INTEGER`})

	const wait = 500 * time.Millisecond
	start := time.Now()
	_, err = migrate.Up(ctx, &target{pool: pool, lockTimeout: wait}, ms)
	took := time.Since(start)
	if !errors.Is(err, migrate.ErrLockTimeout) {
		t.Fatalf("migrate behind a held lock: %v, want ErrLockTimeout", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "events_lock_test") || !strings.Contains(msg, "long transaction") || strings.Contains(msg, "\n") {
		t.Fatalf("message %q: want one line naming the migration and the long transaction", msg)
	}
	if took > wait+3*time.Second {
		t.Fatalf("gave up after %s, want about %s", took, wait)
	}
	var applied bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM hourglass_schema_migrations WHERE name = 'events_lock_test')`).Scan(&applied); err != nil || applied {
		t.Fatalf("recorded as applied: %v, %v", applied, err)
	}
}
