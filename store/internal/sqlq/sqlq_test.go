package sqlq

import (
	"context"
	"strings"
	"testing"
)

func TestRebind(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`a = ? AND b = ?`, `a = $1 AND b = $2`},
		{`a = '?' AND b = ?`, `a = '?' AND b = $1`},
		{`"we?rd" = ? OR x = 'it''s?' OR y = ?`, `"we?rd" = $1 OR x = 'it''s?' OR y = $2`},
		{"`k?` IN (?, ?)", "`k?` IN ($1, $2)"},
	} {
		if got := Rebind(tc.in); got != tc.want {
			t.Errorf("Rebind(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPlaceholders(t *testing.T) {
	if got, want := Placeholders(2, 3), "(?, ?, ?), (?, ?, ?)"; got != want {
		t.Errorf("Placeholders(2, 3) = %q, want %q", got, want)
	}
	if got, want := Placeholders(1, 1), "(?)"; got != want {
		t.Errorf("Placeholders(1, 1) = %q, want %q", got, want)
	}
}

func TestUpsert(t *testing.T) {
	cols, greatest := []string{"seq", "touched_at"}, map[string]bool{"seq": true}
	if got, want := OnConflict("GREATEST")("c", "sink, part", cols, greatest),
		" ON CONFLICT (sink, part) DO UPDATE SET seq = GREATEST(c.seq, excluded.seq), touched_at = excluded.touched_at"; got != want {
		t.Errorf("OnConflict:\n got %q\nwant %q", got, want)
	}
	if got, want := OnDuplicateKey("c", "sink, part", cols, greatest),
		" ON DUPLICATE KEY UPDATE seq = GREATEST(seq, VALUES(seq)), touched_at = VALUES(touched_at)"; got != want {
		t.Errorf("OnDuplicateKey:\n got %q\nwant %q", got, want)
	}
}

// plainQuerier is a Querier that cannot return an inserted id.
type plainQuerier struct{ Querier }

// TestInsertIDNeedsAnInserter: a dialect without RETURNING whose store
// adapts no Inserter gets an error saying so, not a zero id.
func TestInsertIDNeedsAnInserter(t *testing.T) {
	_, err := q{Querier: plainQuerier{}}.insertID(context.Background(), `INSERT INTO t (a) VALUES (?)`, 1)
	if err == nil || !strings.Contains(err.Error(), "cannot return an inserted id") {
		t.Fatalf("insertID on a plain querier: %v", err)
	}
}
