package mysql

import "context"

// What package sourcesql asks of MySQL to check a source's rows and key
// (its badrows.go).

func (d sourceDialect) CurrentSchema(ctx context.Context) (string, error) {
	var s string
	err := d.s.db.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&s)
	return s, err
}

// UniqueIndex reads information_schema.STATISTICS: a unique index (the
// primary key is one) whose only column is column.
func (d sourceDialect) UniqueIndex(ctx context.Context, schema, table, column string) (bool, error) {
	var n int
	err := d.s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (
	SELECT INDEX_NAME FROM information_schema.STATISTICS
	WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0
	GROUP BY INDEX_NAME HAVING COUNT(*) = 1 AND MAX(COLUMN_NAME) = ? AND MAX(SUB_PART) IS NULL) AS u`,
		schema, table, column).Scan(&n)
	return n > 0, err
}

// TimeBounds: a zero date ('0000-00-00', which a session with a lax
// sql_mode writes) sorts below the first.
func (sourceDialect) TimeBounds() (lo, hi string) {
	return "'1970-01-01 00:00:00'", "'9999-12-31 23:59:59.999'"
}

func (sourceDialect) Text(expr string) string { return "CAST(" + expr + " AS CHAR)" }
