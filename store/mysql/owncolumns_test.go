package mysql_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/store/mysql"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// TestOwnColumnsTriggerWithoutPrivilege: an owner without the TRIGGER
// privilege (or, with binary logging on, without SUPER) still migrates and
// serves: the trigger that owns timer_requests' seq and requested_at is
// missing, one WARN says what to grant, and once it is granted the next
// start creates the trigger. (As migration 0011 the same owner's upgrade
// failed.) A shop given docs/timers.md's column grants cannot name seq
// with or without the trigger.
func TestOwnColumnsTriggerWithoutPrivilege(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := mytest.NewDatabase(t)
	admin := mytest.Admin(t, dbURL)
	var db string
	if err := admin.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	suffix := strings.ToLower(rand.Text()[:8])
	owner, shop := "hg_owner_"+suffix, "hg_shop_"+suffix
	for _, q := range []string{
		"CREATE USER '" + owner + "'@'%' IDENTIFIED BY 'owner-pw'",
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, ALTER, INDEX, DROP, REFERENCES ON `" + db + "`.* TO '" + owner + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		admin.Exec("DROP USER IF EXISTS '" + owner + "'@'%'")
		admin.Exec("DROP USER IF EXISTS '" + shop + "'@'%'")
	})
	triggers := func() int {
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND EVENT_OBJECT_TABLE = 'timer_requests'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var logs bytes.Buffer
	ownerURL := withUser(t, dbURL, owner, "owner-pw")
	if _, err := mysql.Migrate(ctx, mysql.Config{URL: ownerURL, Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatalf("migrate as an owner without TRIGGER: %v", err)
	}
	if n := triggers(); n != 0 {
		t.Fatalf("%d triggers on timer_requests created without the TRIGGER privilege", n)
	}
	if w := logs.String(); strings.Count(w, "level=WARN") != 1 || !strings.Contains(w, "grant the migrating user TRIGGER") {
		t.Errorf("the log of a migrate without TRIGGER:\n%s\nwant one WARN saying what to grant", w)
	}

	// docs/timers.md's column grant: the shop names only its columns.
	for _, q := range []string{
		"CREATE USER '" + shop + "'@'%' IDENTIFIED BY 'shop-pw'",
		"GRANT INSERT (timer_key, action, fire_at, delay_ms, payload, webhook_id) ON `" + db + "`.timer_requests TO '" + shop + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	shopDB := mytest.Admin(t, withUser(t, dbURL, shop, "shop-pw"))
	if _, err := shopDB.ExecContext(ctx, "INSERT INTO timer_requests (timer_key, delay_ms) VALUES ('k', 1000)"); err != nil {
		t.Fatalf("the shop's INSERT of its columns: %v", err)
	}
	if _, err := shopDB.ExecContext(ctx, "INSERT INTO timer_requests (seq, timer_key, delay_ms) VALUES (9223372036854775807, 'k', 1000)"); err == nil {
		t.Fatal("the shop's INSERT naming seq succeeded under the column grant")
	}

	if _, err := admin.ExecContext(ctx, "GRANT TRIGGER ON `"+db+"`.* TO '"+owner+"'@'%'"); err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.Migrate(ctx, mysql.Config{URL: ownerURL}); err != nil {
		t.Fatalf("migrate again with TRIGGER: %v", err)
	}
	if n := triggers(); n != 1 {
		t.Fatalf("%d triggers on timer_requests after TRIGGER was granted; want 1", n)
	}
}
