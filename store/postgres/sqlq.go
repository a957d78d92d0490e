package postgres

import (
	"context"

	"github.com/hourglass/hourglass/store/internal/sqlq"
	"github.com/jackc/pgx/v5"
)

// sqlDialect is PostgreSQL to package sqlq.
var sqlDialect = sqlq.Dialect{
	Numbered: true,
	Now:      `COALESCE(?::bigint, ` + dbNow + `)`,
	Upsert:   sqlq.OnConflict("GREATEST"),
	From:     func(table, _ string) string { return table },
	IntDiv:   "/",
	After: func(col, idCol string, at, id int64) (string, []any) {
		return "(" + col + ", " + idCol + ") > (?, ?)", []any{at, id}
	},
	TimerKey: "key",
	InParts:  func(col string) string { return `((?::bigint >> (` + col + ` % 64)::int) & 1) = 1` },
	ByID: func(table, alias string) string {
		return `unnest(?::bigint[]) AS want(id) CROSS JOIN LATERAL (SELECT * FROM ` + table + ` x WHERE x.id = want.id OFFSET 0) ` + alias
	},

	FanoutLists: func(seq string) string { return seq + ` = ANY (p.seqs)` },
	Returning:   true,
	Cascade:     true,
	// The transaction advisory lock every CreateWebhook with a limit takes,
	// on any process: class 0x68676b32 ("hgk2"), key 1.
	LockWebhooks: `SELECT pg_advisory_xact_lock(1751608114, 1)`,
	// TIMESTAMPTZ(3): microseconds since the epoch, exact (numeric), or
	// 'infinity' / '-infinity', which a shop may write and no cast to a
	// number takes (a bigint would also overflow near year 294276): the
	// text always reads, and ParseRequestTime names what it holds.
	RequestTime: func(col string) string {
		return `CASE WHEN isfinite(` + col + `) THEN (extract(epoch FROM ` + col + `) * 1000000)::numeric(30, 0)::text ELSE ` + col + `::text END`
	},
	ParseRequestTime: sqlq.UnixMicros,
	KeepFirst:        func(_, key string) string { return ` ON CONFLICT (` + key + `) DO NOTHING` },
	Arrays:           true,
}

// sqlDB is the store to package sqlq: reads on the pool, writes in a
// transaction (tx: retried, errors mapped by fail).
type sqlDB struct{ s *Store }

func (d sqlDB) Read(ctx context.Context, op string, fn func(q sqlq.Querier) error) error {
	return d.s.fail(op, fn(pgQuerier{d.s.pool}))
}

func (d sqlDB) Write(ctx context.Context, op string, _ sqlq.Lane, fn func(q sqlq.Querier) error) error {
	return d.s.tx(ctx, op, func(tx pgx.Tx) error { return fn(pgQuerier{tx}) })
}

// Autocommit implements sqlq.Autocommitter: the statements on the pool,
// retried as one (retry) and mapped by fail.
func (d sqlDB) Autocommit(ctx context.Context, op string, fn func(q sqlq.Querier) error) error {
	return d.s.fail(op, d.s.retry(ctx, func() error { return fn(pgQuerier{d.s.pool}) }))
}

func (d sqlDB) NowArg() any { return d.s.nowArg() }
