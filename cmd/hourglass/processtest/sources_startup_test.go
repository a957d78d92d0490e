package processtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestSourcesStartup (issue #22): a bad --sources stops serve at start
// with exit status 1 and one error line saying what is wrong; a good one
// whose table lacks the deadline's index starts, with a warning naming the
// index to create.
func TestSourcesStartup(t *testing.T) {
	dir := t.TempDir()
	bin := binary(t)
	url := pgtest.NewDatabase(t)
	db := pgtest.Open(t, url)
	shop := hourglasstest.Shop{DB: db, Schema: "shop", Postgres: true}
	shop.Create(t, false)
	src := shop.Source("shop_orders")
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yamlOf := func(table, guard string) string {
		return "sources:\n  - name: shop_orders\n    table: " + table + "\n    key: id\n    deadline: expire_at\n    pending: \"status = 'UNPAID'\"\n    close:\n      - \"" + guard + "\"\n"
	}
	good := file("good.yaml", yamlOf(src.Table, src.Close[0]))
	pg := []string{"--database-url", url, "--database-schema", "hourglass"}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown key", []string{"--sources", file("key.yaml", strings.Replace(yamlOf(src.Table, src.Close[0]), "key: id", "keys: id", 1))}, `sources[0]: unknown key \"keys\" (did you mean \"key\"?)`},
		{"missing file", []string{"--sources", filepath.Join(dir, "none.yaml")}, "--sources"},
		{"on SQLite", []string{"--sources", good}, "--sources needs PostgreSQL or MySQL"},
		{"unknown table", append([]string{"--sources", file("table.yaml", yamlOf("shop.nope", src.Close[0]))}, pg...), "shop.nope does not exist"},
		{"guard without :key", append([]string{"--sources", file("guard.yaml", yamlOf(src.Table, "UPDATE shop.orders SET status = 'CLOSED' WHERE status = 'UNPAID'"))}, pg...), "must bind the row's key with :key"},
		{"guard does not prepare", append([]string{"--sources", file("prep.yaml", yamlOf(src.Table, "UPDATE shop.orders SET nope = 1 WHERE id = :key"))}, pg...), "close[0]: does not prepare"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "data")}, tt.args...)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1; stderr:\n%s", err, stderr.String())
			}
			var errLines []string
			for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				if strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "hourglass: error:") {
					errLines = append(errLines, line)
				}
			}
			if len(errLines) != 1 || !strings.Contains(errLines[0], tt.want) {
				t.Fatalf("want exactly one error line containing %q, got:\n%s", tt.want, stderr.String())
			}
			t.Logf("%s", errLines[0])
		})
	}

	// A good source on a table without the deadline's index: a warning.
	p := startHourglass(t, "no index", bin, filepath.Join(dir, "data"), append([]string{"--sources", good}, pg...)...)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	out := p.cmd.Stdout.(*logBuffer).String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "CREATE INDEX orders_expire_at ON shop.orders (expire_at)") {
		t.Errorf("no warning naming the index to create:\n%s", out)
	}
}
