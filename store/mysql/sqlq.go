package mysql

import (
	"context"
	"database/sql"

	"github.com/hourglass/hourglass/store/internal/sqlq"
)

// sqlDialect is MySQL and MariaDB to package sqlq.
var sqlDialect = sqlq.Dialect{
	Now:    nowExpr,
	Upsert: sqlq.OnDuplicateKey,
	From:   func(table, index string) string { return table + " FORCE INDEX (" + index + ")" },
	ByKey:  " FORCE INDEX (PRIMARY)",
	IntDiv: "DIV",
	// Not (a, b) > (?, ?): MySQL does not read a row comparison as a range.
	After: func(col, idCol string, at, id int64) (string, []any) {
		return col + " >= ? AND (" + col + " > ? OR " + idCol + " > ?)", []any{at, at, id}
	},
	TimerKey:    "timer_key",
	KeyArg:      func(key string) any { return []byte(key) },
	InParts:     func(col string) string { return `((? >> (` + col + ` % 64)) & 1) = 1` },
	DeleteLimit: true,
	FanoutLists: func(seq string) string { return `FIND_IN_SET(` + seq + `, p.seqs)` },
	// The row CreateWebhook locks before it counts, and writes after: on
	// Galera a row lock is this node's alone, and only a write makes two
	// creates on two nodes conflict (at certification), so that one runs
	// again and counts the other's webhook.
	LockWebhooks:    `SELECT value FROM settings WHERE name = 'webhooks' FOR UPDATE`,
	CountedWebhooks: `UPDATE settings SET value = CAST(? AS CHAR) WHERE name = 'webhooks'`,
	// DATETIME(3) in UTC: microseconds since the epoch, or '' for a zero
	// date.
	RequestTime: func(col string) string {
		return `IF(` + col + ` IS NULL, NULL, COALESCE(` + sinceEpoch(col) + `, ''))`
	},
	ParseRequestTime: sqlq.UnixMicros,
	KeepFirst: func(table, key string) string {
		return ` ON DUPLICATE KEY UPDATE ` + table + `.` + key + ` = ` + table + `.` + key
	},
	// Migration 0008's column: the server (one Galera node of several)
	// whose NOW(3) this process's transactions read.
	DBNode: `CONCAT(@@hostname, ':', @@port)`,
}

// sqlDB is the store to package sqlq: reads on the pool, writes in a
// transaction (inTx: retried, errors mapped by fail).
type sqlDB struct{ s *Store }

func (d sqlDB) Read(ctx context.Context, op string, fn func(q sqlq.Querier) error) error {
	return fail(op, fn(sqlQuerier{q: d.s.db}))
}

func (d sqlDB) Write(ctx context.Context, op string, _ sqlq.Lane, fn func(q sqlq.Querier) error) error {
	return d.s.inTx(ctx, op, func(tx *sql.Tx) error { return fn(sqlQuerier{q: tx}) })
}

func (d sqlDB) NowArg() any { return d.s.nowArg() }
