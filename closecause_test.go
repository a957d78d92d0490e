package hourglass

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCloserFrom: what a store writes of a context's Closer is one of the
// causes and a node id of at most CloseNodeMaxBytes of valid UTF-8.
func TestCloserFrom(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 150) // 300 bytes
	for _, tc := range []struct {
		in   Closer
		want Closer
	}{
		{Closer{Cause: CauseSweeper, Node: "n1"}, Closer{Cause: CauseSweeper, Node: "n1"}},
		{Closer{Cause: "made-up", Node: "n1"}, Closer{}},
		{Closer{Cause: CauseUnknown, Node: "n1"}, Closer{}},
		{Closer{Cause: CauseDeadline, Node: "a\xffb"}, Closer{Cause: CauseDeadline, Node: "ab"}},
		{Closer{Cause: CauseDeadline, Node: long}, Closer{Cause: CauseDeadline, Node: strings.Repeat("é", 100)}},
	} {
		got := CloserFrom(WithCloser(context.Background(), tc.in))
		if got != tc.want || !utf8.ValidString(got.Node) || len(got.Node) > CloseNodeMaxBytes {
			t.Errorf("CloserFrom(%+v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	if got := CloserFrom(context.Background()); got != (Closer{}) {
		t.Errorf("CloserFrom(no closer) = %+v", got)
	}
}
