package mysql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestMigrationGivesUpOnALock: a migration that alters events while another
// session's transaction holds a metadata lock on it gives up after its
// lock_wait_timeout with one line naming the migration and the long
// transaction, instead of queuing (and queuing every event write behind it).
func TestMigrationGivesUpOnALock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := mytest.NewDatabase(t)
	cfg := Config{URL: url}
	db, _, err := connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := migrateDB(ctx, db, cfg); err != nil {
		t.Fatal(err)
	}
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	tx, err := holder.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `SELECT 1 FROM events LIMIT 1`); err != nil { // a shared metadata lock until the end
		t.Fatal(err)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	ms = append(ms, migrate.Migration{Version: len(ms) + 1, Name: "events_lock_test", SQL: `ALTER TABLE events ADD COLUMN lock_test INT`})
	mc, _ := myurl.Parse(url)
	target, err := newTarget(ctx, db, mc.DBName)
	if err != nil {
		t.Fatal(err)
	}
	defer target.conn.Close()
	target.lockTimeout = time.Second

	start := time.Now()
	_, err = migrate.Up(ctx, target, ms)
	took := time.Since(start)
	if !errors.Is(err, migrate.ErrLockTimeout) {
		t.Fatalf("migrate behind a held lock: %v, want ErrLockTimeout", err)
	}
	msg := migrationError(err, mc).Error()
	if !strings.Contains(msg, "events_lock_test") || !strings.Contains(msg, "long transaction") || strings.Contains(msg, "\n") {
		t.Fatalf("message %q: want one line naming the migration and the long transaction", msg)
	}
	if took > 4*time.Second {
		t.Fatalf("gave up after %s, want about 1 s", took)
	}
	var wait int
	if err := target.conn.QueryRowContext(ctx, `SELECT @@SESSION.lock_wait_timeout`).Scan(&wait); err != nil || wait <= 1 {
		t.Fatalf("the migration's connection went back with lock_wait_timeout %d, %v; want the server's default", wait, err)
	}
}
