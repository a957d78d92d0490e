package postgres

import "context"

// What package sourcesql asks of PostgreSQL to check a source's rows and
// key (its badrows.go).

func (d sourceDialect) CurrentSchema(ctx context.Context) (string, error) {
	var s string
	err := d.s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&s)
	return s, err
}

// UniqueIndex reads pg_index: a unique index (a primary key is one) on
// column alone, without a predicate or an expression, and valid.
func (d sourceDialect) UniqueIndex(ctx context.Context, schema, table, column string) (bool, error) {
	var ok bool
	err := d.s.pool.QueryRow(ctx, `SELECT EXISTS (
	SELECT 1 FROM pg_index i
	JOIN pg_class c ON c.oid = i.indrelid
	JOIN pg_namespace n ON n.oid = c.relnamespace
	JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = i.indkey[0]
	WHERE n.nspname = $1 AND c.relname = $2 AND a.attname = $3
	AND i.indisunique AND i.indisvalid AND i.indnkeyatts = 1 AND i.indpred IS NULL AND i.indexprs IS NULL)`,
		schema, table, column).Scan(&ok)
	return ok, err
}

// TimeBounds carry their zone: a TIMESTAMPTZ column compares in UTC
// whatever the session's TimeZone, a TIMESTAMP one ignores it.
func (sourceDialect) TimeBounds() (lo, hi string) {
	return "'1970-01-01 00:00:00+00'", "'9999-12-31 23:59:59.999+00'"
}

func (sourceDialect) Text(expr string) string { return "(" + expr + ")::text" }
