package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/hourglass/hourglass/store/migrate"
	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
)

// checkPrivileges makes a user that can connect but not write every table
// (a database migrated by its owner, a table left out of table-level
// GRANTs) fail at Open with the GRANT to run, rather than at the first
// write that touches that table. It covers every table the migrations
// create (migrate.Tables: a new table is covered without a hand list) that
// the database holds, and writes nothing: EXPLAIN of a DELETE, an UPDATE and
// an INSERT … SELECT needs the privileges of the statement it explains, and
// MySQL and MariaDB check them whatever roles or levels granted them.
func checkPrivileges(ctx context.Context, db *sql.DB, cfg Config) error {
	ms, err := Migrations()
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	mc, _ := myurl.Parse(cfg.URL) // validated by connect
	tables := migrate.Tables(ms)
	// One column of each table, for the UPDATE; a table the database does
	// not hold (a name in a migration's comment) is skipped.
	rows, err := db.QueryContext(ctx, `SELECT LOWER(TABLE_NAME), MIN(COLUMN_NAME) FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND LOWER(TABLE_NAME) IN (`+placeholders(len(tables))+`) GROUP BY LOWER(TABLE_NAME) ORDER BY 1`, anys(tables)...)
	if err != nil {
		return startupError(err, cfg, mc)
	}
	var names, columns []string
	for rows.Next() {
		var name, column string
		if err := rows.Scan(&name, &column); err != nil {
			rows.Close()
			return startupError(err, cfg, mc)
		}
		names, columns = append(names, name), append(columns, column)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return startupError(err, cfg, mc)
	}
	var missing []string
	for i, name := range names {
		table, column := "`"+name+"`", "`"+columns[i]+"`"
		for _, q := range []string{
			`EXPLAIN DELETE FROM ` + table + ` WHERE 1 = 0`,
			`EXPLAIN UPDATE ` + table + ` SET ` + column + ` = ` + column + ` WHERE 1 = 0`,
			`EXPLAIN INSERT INTO ` + table + ` SELECT * FROM ` + table + ` WHERE 1 = 0`,
		} {
			r, err := db.QueryContext(ctx, q)
			if err == nil {
				r.Close()
				continue
			}
			var me *gomysql.MySQLError
			if errors.As(err, &me) && (me.Number == 1142 || me.Number == 1143) {
				missing = append(missing, name)
				break
			}
			return startupError(err, cfg, mc)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("mysql: user %q may not write %s in database %q on %s: GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.* TO '%s'@'%%'",
			mc.User, strings.Join(missing, ", "), mc.DBName, mc.Addr, mc.DBName, mc.User)
	}
	return nil
}
