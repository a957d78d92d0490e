package mytest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"

	"github.com/hourglass/hourglass/internal/testenv"
)

// schemaOf is what a database holds: each table's SHOW CREATE TABLE (its
// AUTO_INCREMENT counter included) and rows, and each trigger's statement.
func schemaOf(t *testing.T, db *sql.DB, name string) []string {
	t.Helper()
	ctx := t.Context()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tables, err := column(ctx, conn, `SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY TABLE_NAME`, name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, table := range tables {
		var n, create string
		if err := conn.QueryRowContext(ctx, "SHOW CREATE TABLE `"+name+"`.`"+table+"`").Scan(&n, &create); err != nil {
			t.Fatal(err)
		}
		rows, err := column(ctx, conn, "SELECT CONCAT_WS(',', id, v) FROM `"+name+"`.`"+table+"` ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, create, fmt.Sprint(rows))
	}
	triggers, err := column(ctx, conn, `SELECT CONCAT_WS(' ', TRIGGER_NAME, ACTION_TIMING, EVENT_MANIPULATION, EVENT_OBJECT_TABLE, ACTION_STATEMENT, SQL_MODE)
FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ? ORDER BY TRIGGER_NAME`, name)
	if err != nil {
		t.Fatal(err)
	}
	return append(out, triggers...)
}

// TestNewDatabaseFrom: each copy holds what the template holds (tables
// with their keys, checks, foreign keys, rows and AUTO_INCREMENT counters,
// and triggers), and behaves as it does.
func TestNewDatabaseFrom(t *testing.T) {
	raw := testenv.ServiceURL(t, "MySQL", EnvURL, DefaultURL)
	prepared := 0
	tmpl := Template{Key: t.Name(), Prepare: func(ctx context.Context, url string) error {
		prepared++
		db := Admin(t, url)
		for _, stmt := range []string{
			"CREATE TABLE a (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT NOT NULL, CONSTRAINT a_v CHECK (v >= 0)) AUTO_INCREMENT = 1000",
			"CREATE TABLE b (id BIGINT PRIMARY KEY, v BIGINT, KEY b_v (v), CONSTRAINT b_a FOREIGN KEY (v) REFERENCES a (id))",
			"INSERT INTO a (v) VALUES (1), (2)",
			"INSERT INTO b VALUES (1, 1000)",
			"CREATE TRIGGER b_shift BEFORE INSERT ON b FOR EACH ROW SET NEW.id = NEW.id + 100",
		} {
			if _, err := db.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return nil
	}}
	first, second := NewDatabaseFrom(t, tmpl), NewDatabaseFrom(t, tmpl)
	if prepared != 1 {
		t.Fatalf("Prepare ran %d times for two copies, want once", prepared)
	}
	from, err := templateOf(t, raw, tmpl)
	if err != nil {
		t.Fatal(err)
	}
	admin := Admin(t, raw)
	want := schemaOf(t, admin, from)
	for _, u := range []string{first, second} {
		db := Admin(t, u)
		var name string
		if err := db.QueryRowContext(t.Context(), "SELECT DATABASE()").Scan(&name); err != nil {
			t.Fatal(err)
		}
		if got := schemaOf(t, admin, name); !slices.Equal(got, want) {
			t.Fatalf("copy %s holds\n%q\nwant the template's\n%q", name, got, want)
		}
	}
	db := Admin(t, first)
	ctx := t.Context()
	res, err := db.ExecContext(ctx, "INSERT INTO a (v) VALUES (3)")
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := res.LastInsertId(); id != 1002 {
		t.Fatalf("the copy's next id is %d, want 1002 (the template's counter)", id)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO a (v) VALUES (-1)"); err == nil {
		t.Fatal("the copy took a row its CHECK refuses")
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO b VALUES (2, 5)"); err == nil {
		t.Fatal("the copy took a row its foreign key refuses")
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO b VALUES (2, 1001)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM b WHERE id = 102").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the copy's trigger did not run: %d rows with id 102, %v", n, err)
	}
}

// TestStaleTemplateDropped: building a template drops the templates no
// live process holds, and keeps those one does.
func TestStaleTemplateDropped(t *testing.T) {
	raw := testenv.ServiceURL(t, "MySQL", EnvURL, DefaultURL)
	admin := Admin(t, raw)
	ctx := t.Context()
	live := Template{Key: t.Name() + " live", Prepare: func(context.Context, string) error { return nil }}
	kept, err := templateOf(t, raw, live)
	if err != nil {
		t.Fatal(err)
	}
	stale := randomName(templatePrefix)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+stale+"`"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+stale+"`") })
	NewDatabaseFrom(t, Template{Key: t.Name(), Prepare: func(context.Context, string) error { return nil }})
	exists := func(name string) bool {
		var n int
		if err := admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	if exists(stale) {
		t.Errorf("the stale template %s is still there", stale)
	}
	if !exists(kept) {
		t.Errorf("the live template %s was dropped", kept)
	}
}

// templateOf is the name of tmpl's template database on the server at
// raw, which it builds if this process has not.
func templateOf(t *testing.T, raw string, tmpl Template) (string, error) {
	tp, err := processTemplates.Get(raw+"\x00"+tmpl.Key, func() (template, error) { return buildTemplate(t.Context(), raw, tmpl) })
	return tp.name, err
}
