package hourglass

import (
	"strconv"
	"strings"
	"testing"
)

// TestBindKey: :key is bound outside quotes only, never inside a longer
// name or a PostgreSQL cast, each occurrence its own placeholder.
func TestBindKey(t *testing.T) {
	t.Parallel()
	pg := func(n int) string { return "$" + strconv.Itoa(n) }
	for _, c := range []struct{ in, want string }{
		{"UPDATE o SET s = 'C' WHERE id = :key", "UPDATE o SET s = 'C' WHERE id = $1"},
		{"WHERE id BETWEEN :key - 1 AND :key + 1", "WHERE id BETWEEN $1 - 1 AND $2 + 1"},
		{"WHERE note = ':key' AND id = :key", "WHERE note = ':key' AND id = $1"},
		{"WHERE \"a:key\" = 1 AND `b:key` = :key", "WHERE \"a:key\" = 1 AND `b:key` = $1"},
		{"WHERE id = :keys AND x = y::key", "WHERE id = :keys AND x = y::key"},
	} {
		got := BindKey(c.in, pg)
		if got.SQL != c.want || len(got.Params) != strings.Count(c.want, "$") {
			t.Errorf("BindKey(%q) = %q, %d params; want %q", c.in, got.SQL, len(got.Params), c.want)
		}
	}
}

// TestBindKeys: each :keys outside quotes becomes the list of n
// placeholders, numbered on across uses; :key and text are left alone.
func TestBindKeys(t *testing.T) {
	t.Parallel()
	pg := func(n int) string { return "$" + strconv.Itoa(n) }
	for _, c := range []struct {
		in   string
		n    int
		want string
		uses int
	}{
		{"SELECT 1 FROM s WHERE id IN (:keys)", 3, "SELECT 1 FROM s WHERE id IN ($1, $2, $3)", 1},
		{"WHERE a IN (:keys) OR b IN (:keys)", 2, "WHERE a IN ($1, $2) OR b IN ($3, $4)", 2},
		{"WHERE note = ':keys' AND id = :key AND x = y::keys", 1, "WHERE note = ':keys' AND id = :key AND x = y::keys", 0},
		{"WHERE id IN (:keys2)", 1, "WHERE id IN (:keys2)", 0},
	} {
		got, uses := BindKeys(c.in, c.n, pg)
		if got != c.want || uses != c.uses {
			t.Errorf("BindKeys(%q, %d) = %q, %d uses; want %q, %d", c.in, c.n, got, uses, c.want, c.uses)
		}
	}
}

// TestCheckSQLText: one statement without comments, quotes closed; a ;
// or -- inside quotes is text.
func TestCheckSQLText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"UPDATE o SET n = 'a;b -- c' WHERE id = :key", ""},
		{"   ", "empty"},
		{"UPDATE o SET n = 1; DELETE FROM o", "one statement"},
		{"UPDATE o SET n = 1 -- :key", "no comments"},
		{"UPDATE o SET n = 1 /* x */", "no comments"},
		{"UPDATE o SET n = 'open", "unterminated quote '"},
		{strings.Repeat("x", MaxSourceSQL+1), "at most"},
	} {
		err := checkSQLText(c.in)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkSQLText(%.40q) = %v; want %q", c.in, err, c.want)
		}
	}
}
