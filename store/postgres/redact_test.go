package postgres

import (
	"strings"
	"testing"
)

func TestScrub(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ msg, url, leak string }{
		{"cannot parse `postgres://u:pw@h/db`", "postgres://u:pw@h/db", "pw"},
		{"bad postgres://u:p@ss@host/db here", "postgres://u:p@ss@host/db", "p@ss"},
		{"user=u password=hunter2x", "postgres://u:hunter2x@h/db", "hunter2x"},
	} {
		got := scrub(tt.msg, tt.url)
		if strings.Contains(got, tt.leak) {
			t.Errorf("scrub(%q) = %q, still shows %q", tt.msg, got, tt.leak)
		}
	}
	if got := redact("postgres://u:secret@h:5432/db"); strings.Contains(got, "secret") {
		t.Errorf("redact = %q", got)
	}
}
