package store

import (
	"strings"
	"testing"
)

// TestRedact: what cmd/hourglass logs of the database URL hides every
// password, in the userinfo or in a parameter named like one.
func TestRedact(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"postgres://app:hunter2x@db:5432/shop",
		"postgres://app@db:5432/shop?sslmode=require&password=hunter2x",
		"postgresql://app@db/shop?sslpassword=hunter2x&passwd=hunter2x&pwd=hunter2x",
		"mysql://app:hunter2x@db:3306/shop",
		"mysql://app:hunter%zz@db:3306/shop?password=hunter2x",
		"not a url hunter2x@db",
	} {
		got := Redact(raw)
		if strings.Contains(got, "hunter") {
			t.Errorf("Redact(%q) = %q", raw, got)
		}
		if strings.Contains(raw, "shop") && !strings.Contains(got, "shop") {
			t.Errorf("Redact(%q) = %q: the database name should stay", raw, got)
		}
	}
}
