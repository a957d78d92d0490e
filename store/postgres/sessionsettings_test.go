package postgres

import (
	"strings"
	"testing"

	"github.com/hourglass/hourglass/store/postgres/pgtest"
)

// TestSessionSettings: the store's connections run with enable_seqscan and
// jit off (postgres.go: the generic plans a small table would leave), and
// a URL that sets either keeps its own value.
func TestSessionSettings(t *testing.T) {
	url := pgtest.NewDatabase(t)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	for _, c := range []struct{ params, seqscan, jit string }{
		{"", "off", "off"},
		{sep + "enable_seqscan=on", "on", "off"},
		{sep + "jit=on", "off", "on"},
	} {
		s, err := Open(t.Context(), Config{URL: url + c.params, MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		var seqscan, jit string
		if err := s.pool.QueryRow(t.Context(), `SELECT current_setting('enable_seqscan'), current_setting('jit')`).Scan(&seqscan, &jit); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if seqscan != c.seqscan || jit != c.jit {
			t.Errorf("URL params %q: enable_seqscan %s, jit %s; want %s, %s", c.params, seqscan, jit, c.seqscan, c.jit)
		}
	}
}
