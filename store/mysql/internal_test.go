package mysql

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

func TestServerVersions(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		version string
		mariaDB bool
		ok      bool
	}{
		{"8.0.36", false, true},
		{"8.4.2-commercial", false, true},
		{"9.1.0", false, true},
		{"5.7.44-log", false, false},
		{"10.11.19-MariaDB-0+deb12u1", true, true},
		{"10.6.0-MariaDB", true, true},
		{"10.5.23-MariaDB-log", true, false},
		{"5.5.5-10.4.32-MariaDB", true, false},
		{"11.4.2-MariaDB", true, true},
	} {
		v := parseVersion(tt.version)
		err := v.supported("db:3306")
		if v.mariaDB != tt.mariaDB || (err == nil) != tt.ok {
			t.Errorf("%s: mariaDB=%v, supported=%v; want %v, %v", tt.version, v.mariaDB, err, tt.mariaDB, tt.ok)
		}
		if err != nil && (strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "too old")) {
			t.Errorf("%s: %q is not one line saying the server is too old", tt.version, err)
		}
	}
}

func TestSplitStatements(t *testing.T) {
	t.Parallel()
	got := splitStatements("-- a comment; with a semicolon;\nCREATE TABLE a (\n\tx INT -- inline\n);\n\nINSERT INTO a VALUES (1);\nSELECT 1")
	if len(got) != 3 || !strings.HasPrefix(got[0], "CREATE TABLE a") || got[1] != "INSERT INTO a VALUES (1)" || got[2] != "SELECT 1" {
		t.Fatalf("split = %q", got)
	}
	ms, err := Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, st := range splitStatements(m.SQL) {
			if strings.Contains(st, ";") {
				t.Errorf("migration %d: statement holds a ';': %q", m.Version, st)
			}
		}
	}
}

// TestBrokenWriteDoesNotFailItsBatch: when one write of a group commit
// fails for a reason that is not a domain refusal, the batch is rolled back
// and each write is retried alone: the good ones commit and only the broken
// one gets the error.
func TestBrokenWriteDoesNotFailItsBatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: mytest.NewDatabase(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.PutProduct(ctx, hourglass.Product{SKU: "A", Available: 10}); err != nil {
		t.Fatal(err)
	}
	items := []hourglass.Item{{SKU: "A", Quantity: 1}}
	good := func() *op {
		return &op{ctx: ctx, kind: opCreate, create: hourglass.CreateOrderParams{UserID: "u", Items: items, Timeout: time.Minute},
			items: stored.EncodeItems(items), result: make(chan opResult, 1)}
	}
	bad := good()
	bad.items = strings.Repeat("x", 70000) // longer than a TEXT column
	ops := []*op{good(), bad, good()}
	// Queue all three at once, so one writer takes them as one batch.
	s.queue.PushAll(ops, false)
	for i, o := range ops {
		r := <-o.result
		if o == bad {
			if r.err == nil || hourglass.ErrorCode(r.err) != hourglass.CodeInternal {
				t.Fatalf("the broken write returned %v, want an internal error", r.err)
			}
			continue
		}
		if r.err != nil || !r.created {
			t.Fatalf("good write %d failed with its batch: %v", i, r.err)
		}
	}
	p, err := s.Product(ctx, "A")
	if err != nil || p.Available != 8 || p.Reserved != 2 {
		t.Fatalf("product %+v, %v: want the two good reservations only", p, err)
	}
}
