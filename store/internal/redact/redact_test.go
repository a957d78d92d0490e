package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ raw, want string }{
		{"postgres://u:pw@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"postgres://u@h/db?password=hunter2x&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"postgresql://u@h/db?sslmode=require&sslpassword=hunter2x", "postgresql://u@h/db?sslmode=require&sslpassword=xxxxx"},
		{"postgres://u@h/db?PassWord=hunter2x&passwd=hunter2x&pwd=hunter2x&client_secret=hunter2x", "postgres://u@h/db?PassWord=xxxxx&passwd=xxxxx&pwd=xxxxx&client_secret=xxxxx"},
		{"postgres://u@h/db?pass%77ord=hunter2x", "postgres://u@h/db?pass%77ord=xxxxx"},
		{"postgres://u:pw@h/db?password=hunter2x", "postgres://u:xxxxx@h/db?password=xxxxx"},
		{"mysql://u:pw@h:1/db", "mysql://u:xxxxx@h:1/db"},
		{"mysql://u:p%zz@h:1/db", "mysql://u:xxxxx@h:1/db"},
		{"mysql://u:p%zz@h:1/db?password=hunter2x", "mysql://u:xxxxx@h:1/db?password=xxxxx"},
		{"mysql://u@h/db", "mysql://u@h/db"},
		{"sqlite:///var/lib/hg.db", "sqlite:///var/lib/hg.db"},
		{"garbage with pw", "(unparsable URL)"},
		{"u:hunter2x@h/db", "xxxxx@h/db"},
	} {
		if got := URL(tt.raw); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestScrub(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ msg, raw, leak string }{
		{"cannot parse `postgres://u:pw@h/db`", "postgres://u:pw@h/db", "pw@"},
		{"bad postgres://u:p@ss@host/db here", "postgres://u:p@ss@host/db", "p@ss"},
		{"user=u password=hunter2x", "postgres://u:hunter2x@h/db", "hunter2x"},
		{"user=u password=hunter2x host=h", "postgres://u@h/db?password=hunter2x", "hunter2x"},
		{"cannot parse `postgres://u@h/db?password=hunter2x`", "postgres://u@h/db?password=hunter2x", "hunter2x"},
		{"failed: sslpassword='hunter 2x' invalid", "postgres://u@h/db", "hunter 2x"},
		{"escaped hunter%2Fx", "postgres://u@h/db?password=hunter%2Fx", "hunter%2Fx"},
	} {
		if got := Scrub(tt.msg, tt.raw); strings.Contains(got, tt.leak) {
			t.Errorf("Scrub(%q) = %q, still shows %q", tt.msg, got, tt.leak)
		}
	}
}
