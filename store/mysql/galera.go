package mysql

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass/store/internal/writer"
)

// Galera (MariaDB Galera Cluster, Percona XtraDB Cluster) replicates each
// transaction's writes to every node at COMMIT, where certification lets
// the first of two conflicting transactions in the cluster's total order
// commit and fails the other with error 1213: what the store already
// retries. Three things differ from one server and are handled here and in
// connect: row locks and GET_LOCK are a node's own (so a lock that must
// hold across processes is a row that is written, not merely locked); a
// node applies the others' commits a little later (so sessions set
// wsrep_sync_wait, see connect); and auto-increment ids step by the
// cluster's size (auto_increment_increment, which batch.go reads).

// galeraSettings reports whether the server is a Galera node (wsrep_on=ON)
// and its global wsrep_sync_wait. wsrep_on exists on MariaDB and Percona
// XtraDB Cluster only: elsewhere SHOW VARIABLES finds nothing.
func galeraSettings(ctx context.Context, q querier) (on bool, syncWait int, err error) {
	rows, err := q.QueryContext(ctx, `SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_sync_wait')`)
	if err != nil {
		return false, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return false, 0, err
		}
		switch strings.ToLower(name) {
		case "wsrep_on":
			on = strings.EqualFold(value, "ON")
		case "wsrep_sync_wait":
			syncWait, _ = strconv.Atoi(value)
		}
	}
	return on, syncWait, rows.Err()
}

// lockTable holds the migration lock on Galera: at most one row (id 1),
// whose owner holds the lock until expires_at (the database server's unix
// milliseconds). It is not a migration: the lock is taken before the
// migrations are read.
const lockTable = "hourglass_migration_lock"

const (
	// migrationLease is how long the lease row holds without a renewal: a
	// process that died holding it delays the others this long.
	migrationLease = 30 * time.Second
	// migrationRenew is how often the holder renews its lease.
	migrationRenew = 5 * time.Second
	// migrationPoll is how often a waiting process looks at the lease.
	migrationPoll = 100 * time.Millisecond
)

// leaseLock takes the migration lock on a Galera node, waiting up to wait.
//
// Taking it is one transaction on the dedicated connection that writes the
// lease row with our owner token and a new expiry if the row is absent,
// expired or ours (tryLease). Two processes doing so at once on different
// nodes both write row 1, so certification commits the first and fails the
// other (1213 at COMMIT); that one looks again and finds the lease taken. While
// the migrations run, a goroutine renews the lease every migrationRenew on
// a second connection of the pool (with a pool of one connection the
// renewal waits and a migration longer than migrationLease may be entered
// by another process too: harmless, every statement of a migration can run
// twice, but not "once"). Unlock deletes the row.
func (t *target) leaseLock(ctx context.Context, wait time.Duration) (func() error, error) {
	// Another process's DDL (its CREATE of the table, in total order on
	// every node) can abort this one's look-up as a deadlock: run it again.
	if err := retryPolicy().Do(ctx, func() error { return t.ensureLockTable(ctx) }, classifyLost, nil); err != nil {
		return nil, err
	}
	owner := rand.Text()
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		got, err := t.tryLease(waitCtx, owner)
		if err != nil {
			if waitCtx.Err() != nil && ctx.Err() == nil {
				break
			}
			return nil, err
		}
		if got {
			return t.holdLease(owner), nil
		}
		select {
		case <-waitCtx.Done():
		case <-time.After(migrationPoll):
			continue
		}
		break
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("another process has held the migration lock (table %s) for %s; is a migration stuck?", lockTable, wait)
}

// ensureLockTable creates the lease table unless it exists (looked up
// first: CREATE needs the CREATE privilege even when the table exists).
func (t *target) ensureLockTable(ctx context.Context) error {
	var exists int
	if err := t.conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = ?`, lockTable).Scan(&exists); err != nil {
		return err
	}
	if exists > 0 {
		return nil
	}
	// DDL on Galera runs in total order on every node: two processes
	// creating it at once both succeed.
	_, err := t.conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+lockTable+` (
	id         TINYINT NOT NULL,
	owner      VARCHAR(64) NOT NULL,
	expires_at BIGINT NOT NULL,
	PRIMARY KEY (id)
) ENGINE = InnoDB`)
	return err
}

// tryLease takes the lease for owner if it is free, expired or already
// owner's, deciding in the writing statements themselves: a decision read
// first (SELECT … FOR UPDATE, then write) can be overtaken on Galera by
// another node's commit applied here in between, which a blind write would
// then overwrite without a conflict. A lost certification (or a deadlock,
// a duplicate key) is "not taken": the caller looks again.
func (t *target) tryLease(ctx context.Context, owner string) (bool, error) {
	tx, err := t.conn.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	lease := migrationLease.Milliseconds()
	res, err := tx.ExecContext(ctx, `UPDATE `+lockTable+` SET owner = ?, expires_at = `+dbNowMs+` + ?
WHERE id = 1 AND (owner = ? OR expires_at <= `+dbNowMs+`)`, owner, lease, owner)
	if err != nil {
		return false, t.lost(err)
	}
	n, err := res.RowsAffected() // rows matched (clientFoundRows)
	if err != nil {
		return false, err
	}
	if n == 0 {
		res, err = tx.ExecContext(ctx, `INSERT IGNORE INTO `+lockTable+` (id, owner, expires_at) VALUES (1, ?, `+dbNowMs+` + ?)`, owner, lease)
		if err != nil {
			return false, t.lost(err)
		}
		if n, err = res.RowsAffected(); err != nil {
			return false, err
		}
	}
	if n == 0 {
		return false, nil // held by another process
	}
	if err := tx.Commit(); err != nil {
		return false, t.lost(err)
	}
	return true, nil
}

// lost returns nil, after counting it, when err means another process's
// write won the race for the lease row; else err.
func (t *target) lost(err error) error {
	reason := retryReason(err, true)
	if reason == "" {
		return err
	}
	if t.observe != nil {
		t.observe(reason)
	}
	return nil
}

// holdLease renews owner's lease until the returned unlock stops the
// renewal and deletes the row.
func (t *target) holdLease(owner string) func() error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(migrationRenew)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				// A failed renewal is tried again at the next tick; the
				// lease outlasts a few.
				t.db.ExecContext(ctx, `UPDATE `+lockTable+` SET expires_at = `+dbNowMs+` + ? WHERE id = 1 AND owner = ?`,
					migrationLease.Milliseconds(), owner)
			}
		}
	}()
	return func() error {
		cancel()
		<-done
		// A background context: the lease must go even when the caller's
		// ctx ended (else the others wait for its expiry).
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return retryPolicy().Do(ctx, func() error {
			_, err := t.conn.ExecContext(ctx, `DELETE FROM `+lockTable+` WHERE id = 1 AND owner = ?`, owner)
			return err
		}, classifyLost, nil)
	}
}

// classifyLost names a lost race (a deadlock, a lock wait timeout, a lost
// certification: retryReason) a Retry of the migration lock's statements,
// and anything else final.
func classifyLost(err error) writer.Class {
	if retryReason(err, false) != "" {
		return writer.Class{Kind: writer.Retry}
	}
	return writer.Class{Kind: writer.OneWrite}
}
