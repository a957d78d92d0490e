package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/sqlq"
	"zombiezen.com/go/sqlite"
)

// sqlDialect is SQLite to package sqlq.
var sqlDialect = sqlq.Dialect{
	Now:    `?`,
	Upsert: sqlq.OnConflict("max"),
	From:   func(table, index string) string { return table + " INDEXED BY " + index },
	IntDiv: "/",
	After: func(col, idCol string, at, id int64) (string, []any) {
		return "(" + col + " > ? OR (" + col + " = ? AND " + idCol + " > ?))", []any{at, at, id}
	},
	TimerKey:    "key",
	InParts:     func(col string) string { return `((? >> (` + col + ` % 64)) & 1) = 1` },
	FanoutLists: func(seq string) string { return seq + ` BETWEEN p.first_seq AND p.last_seq` },
	Returning:   true,
	ByKey:       " NOT INDEXED",
	// No LockWebhooks: the one writer runs the creates one after another.
	// TEXT a shop writes: read when it could be a time, else its start,
	// which no time parses (what a listing shows).
	RequestTime: func(col string) string {
		return `CASE WHEN octet_length(` + col + `) <= 64 THEN ` + col + ` ELSE substr(` + col + `, 1, 64) || '…' END`
	},
	ParseRequestTime: parseRequestColumn,
	OneWriter:        true, // the one writer applies the requests
	KeepFirst:        func(_, key string) string { return ` ON CONFLICT (` + key + `) DO NOTHING` },
}

// sqlDB is the store to package sqlq: reads on a pooled read connection,
// writes through the writer (its normal or low lane).
type sqlDB struct{ s *Store }

func (d sqlDB) Read(ctx context.Context, op string, fn func(q sqlq.Querier) error) error {
	return d.s.read(ctx, func(conn *sqlite.Conn) error { return wrap(op, fn(connQuerier{conn})) })
}

func (d sqlDB) Write(ctx context.Context, op string, lane sqlq.Lane, fn func(q sqlq.Querier) error) error {
	run := func(conn *sqlite.Conn, _ time.Time) error { return wrap(op, fn(connQuerier{conn})) }
	if lane == sqlq.Low {
		return d.s.writeLow(ctx, run)
	}
	return d.s.write(ctx, run)
}

// NowArg is the store's clock: SQLite has no clock of its own to prefer.
func (d sqlDB) NowArg() any { return hourglass.UnixMilli(d.s.clock.Now()) }

// wrap names the package and op in err; an *hourglass.Error passes through.
func wrap(op string, err error) error {
	var he *hourglass.Error
	if err == nil || errors.As(err, &he) {
		return err
	}
	return fmt.Errorf("sqlite: %s: %w", op, err)
}

// connQuerier adapts a connection: its statements are prepared once and
// cached by the connection.
type connQuerier struct{ conn *sqlite.Conn }

func (c connQuerier) prepare(query string, args []any) (*sqlite.Stmt, error) {
	st, err := c.conn.Prepare(query)
	if err != nil {
		return nil, err
	}
	for i, a := range args {
		if err := bind(st, i+1, a); err != nil {
			st.Reset()
			st.ClearBindings()
			return nil, err
		}
	}
	return st, nil
}

func bind(st *sqlite.Stmt, i int, a any) error {
	switch v := a.(type) {
	case nil:
		st.BindNull(i)
	case int:
		st.BindInt64(i, int64(v))
	case int32:
		st.BindInt64(i, int64(v))
	case int64:
		st.BindInt64(i, v)
	case bool:
		st.BindBool(i, v)
	case float64:
		st.BindFloat(i, v)
	case string:
		st.BindText(i, v)
	case []byte:
		if v == nil {
			st.BindNull(i)
		} else {
			st.BindBytes(i, v)
		}
	case time.Time: // as the store writes times: unix ms
		st.BindInt64(i, hourglass.UnixMilli(v))
	default:
		return fmt.Errorf("bind parameter %d: unsupported type %T", i, a)
	}
	return nil
}

func (c connQuerier) Query(_ context.Context, query string, args ...any) (sqlq.Rows, error) {
	st, err := c.prepare(query, args)
	if err != nil {
		return nil, err
	}
	return &connRows{st: st}, nil
}

func (c connQuerier) Exec(_ context.Context, query string, args ...any) (int64, error) {
	st, err := c.prepare(query, args)
	if err != nil {
		return 0, err
	}
	defer st.ClearBindings()
	defer st.Reset()
	for {
		row, err := st.Step()
		if err != nil {
			return 0, err
		}
		if !row {
			return int64(c.conn.Changes()), nil
		}
	}
}

// connRows is a statement being stepped.
type connRows struct {
	st  *sqlite.Stmt
	err error
}

func (r *connRows) Next() bool {
	if r.err != nil || r.st == nil {
		return false
	}
	row, err := r.st.Step()
	r.err = err
	return row && err == nil
}

func (r *connRows) Scan(dest ...any) error {
	for i, d := range dest {
		switch p := d.(type) {
		case *int64:
			*p = r.st.ColumnInt64(i)
		case *int:
			*p = int(r.st.ColumnInt64(i))
		case *int32:
			*p = int32(r.st.ColumnInt64(i))
		case *bool:
			*p = r.st.ColumnInt64(i) != 0
		case *float64:
			*p = r.st.ColumnFloat(i)
		case *string:
			*p = r.st.ColumnText(i)
		case *[]byte:
			*p = columnBytes(r.st, i)
		case **int64:
			if r.st.ColumnIsNull(i) {
				*p = nil
			} else {
				v := r.st.ColumnInt64(i)
				*p = &v
			}
		case **string:
			if r.st.ColumnIsNull(i) {
				*p = nil
			} else {
				v := r.st.ColumnText(i)
				*p = &v
			}
		default:
			return fmt.Errorf("scan column %d: unsupported type %T", i, d)
		}
	}
	return nil
}

func (r *connRows) Err() error { return r.err }

func (r *connRows) Close() {
	if r.st != nil {
		r.st.Reset()
		r.st.ClearBindings()
		r.st = nil
	}
}
