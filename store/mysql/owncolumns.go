package mysql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
)

// ownColumnsTrigger sets seq and requested_at of every timer_requests row
// whatever a shop's INSERT says: one INSERT … (seq, …) VALUES
// (9223372036854775807, …) set AUTO_INCREMENT past its end, and every later
// INSERT of every shop failed with error 167 until an ALTER TABLE; a seq
// just ahead of the counter made later INSERTs fail with a duplicate key; a
// requested_at of the shop's choosing moved its delay. seq NULL is replaced
// by the next AUTO_INCREMENT value whatever the session's sql_mode
// (NO_AUTO_VALUE_ON_ZERO included); requested_at is the server's clock.
//
// It is not a migration: creating a trigger needs the TRIGGER privilege
// and, with binary logging on (MySQL 8's default), SUPER or
// log_bin_trust_function_creators = 1, which many owners lack. A migration
// that failed would stop every upgrade; instead each start (and
// `hourglass migrate`) creates it when it is missing and, when it cannot,
// logs one WARN saying what to grant. The column grants docs/timers.md
// gives protect the table without it.
const (
	ownColumnsTrigger = "timer_requests_own_columns"
	ownColumnsSQL     = "CREATE TRIGGER " + ownColumnsTrigger + " BEFORE INSERT ON timer_requests FOR EACH ROW SET NEW.seq = NULL, NEW.requested_at = UTC_TIMESTAMP(3)"
)

// ensureOwnColumns creates ownColumnsTrigger on t's database if it is
// missing, under the migration lock, as a migration's DDL runs (on Galera
// a CREATE TRIGGER run beside other processes' migration locks, outside
// the lock, stalled the cluster in total order isolation). It returns an
// error only when it could not tell: a missing privilege is logged (WARN)
// and the store opens without the trigger.
func ensureOwnColumns(ctx context.Context, t *target, log *slog.Logger) error {
	// On Galera a read of information_schema beside another database's
	// DDL (total order isolation) can be aborted with 1213: read again.
	exists := func() (bool, error) {
		var n int
		var err error
		for attempt := 1; ; attempt++ {
			err = t.conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TRIGGERS
WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME = ?`, ownColumnsTrigger).Scan(&n)
			var me *gomysql.MySQLError
			if err == nil || attempt == 5 || !errors.As(err, &me) || me.Number != 1213 || ctx.Err() != nil {
				break
			}
			time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
		}
		if err != nil {
			return false, fmt.Errorf("look for the trigger %s: %w", ownColumnsTrigger, err)
		}
		return n > 0, nil
	}
	if ok, err := exists(); ok || err != nil {
		return err
	}
	unlock, err := t.Lock(ctx)
	if err != nil {
		return fmt.Errorf("take the migration lock to create the trigger %s: %w", ownColumnsTrigger, err)
	}
	defer unlock()
	if ok, err := exists(); ok || err != nil {
		return err // another process created it meanwhile
	}
	_, err = t.conn.ExecContext(ctx, ownColumnsSQL)
	var me *gomysql.MySQLError
	switch {
	case err == nil:
		log.Info("mysql: created the trigger that owns timer_requests' seq and requested_at", "trigger", ownColumnsTrigger)
		return nil
	case errors.As(err, &me) && me.Number == 1359: // another process created it meanwhile
		return nil
	case errors.As(err, &me) && (me.Number == 1142 || me.Number == 1227 || me.Number == 1419 || me.Number == 1044):
		log.Warn("mysql: cannot create the trigger that keeps a shop's INSERT from setting timer_requests' seq and requested_at;"+
			" grant the migrating user TRIGGER (and, with binary logging on, SUPER or SET GLOBAL log_bin_trust_function_creators = 1),"+
			" or give shops only the column grants of docs/timers.md", "trigger", ownColumnsTrigger, "err", err)
		return nil
	}
	return fmt.Errorf("create the trigger %s: %w", ownColumnsTrigger, err)
}
