package source

import (
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// TestCauses: a row's close records the payment check's answer or the
// sweeper when they handed it over, else recovery when it was due before
// the runner started, takeover when due before its partition was gained,
// and its deadline otherwise; a settled close forgets the mark.
func TestCauses(t *testing.T) {
	start := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	keyIn := func(p int) int64 {
		for k := int64(1); ; k++ {
			if hourglass.PartitionOf(k) == p {
				return k
			}
		}
	}
	a, b := keyIn(0), keyIn(1)
	c := newCauses(start, hourglass.Parts{0})
	gain := start.Add(time.Minute)
	c.own(hourglass.Parts{0, 1}, gain)

	for _, tc := range []struct {
		name string
		row  hourglass.DueItem
		want hourglass.CloseCause
	}{
		{"due before the start", hourglass.DueItem{ID: a, At: start.Add(-time.Second)}, hourglass.CauseRecovery},
		{"due after the start, partition owned since", hourglass.DueItem{ID: a, At: start.Add(30 * time.Second)}, hourglass.CauseDeadline},
		{"due before its partition was gained", hourglass.DueItem{ID: b, At: start.Add(30 * time.Second)}, hourglass.CauseTakeover},
		{"due after its partition was gained", hourglass.DueItem{ID: b, At: gain.Add(time.Second)}, hourglass.CauseDeadline},
	} {
		if got := c.of(tc.row); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}

	row := hourglass.DueItem{ID: a, At: start.Add(-time.Second)}
	c.mark(a, hourglass.CauseSweeper)
	if got := c.of(row); got != hourglass.CauseSweeper {
		t.Errorf("swept: %q", got)
	}
	c.mark(a, hourglass.CauseCheckFailed)
	order, groups := c.byCause([]hourglass.DueItem{row, {ID: b, At: gain.Add(time.Second)}})
	if len(order) != 2 || order[0] != hourglass.CauseCheckFailed || len(groups[hourglass.CauseDeadline]) != 1 {
		t.Errorf("byCause: %v %v", order, groups)
	}
	c.done(a)
	if got := c.of(row); got != hourglass.CauseRecovery {
		t.Errorf("after its close settled: %q, want recovery", got)
	}

	// In a cluster a node starts owning nothing: its first partitions are
	// its start (rows due before: recovery), the later ones takeovers.
	c = newCauses(start, hourglass.Parts{})
	first, second := start.Add(time.Second), start.Add(time.Minute)
	c.own(hourglass.Parts{0}, first)
	c.own(hourglass.Parts{0, 1}, second)
	for _, tc := range []struct {
		name string
		row  hourglass.DueItem
		want hourglass.CloseCause
	}{
		{"due before the first partitions", hourglass.DueItem{ID: a, At: start.Add(500 * time.Millisecond)}, hourglass.CauseRecovery},
		{"due after them", hourglass.DueItem{ID: a, At: first.Add(time.Second)}, hourglass.CauseDeadline},
		{"due before a later gain", hourglass.DueItem{ID: b, At: first.Add(time.Second)}, hourglass.CauseTakeover},
	} {
		if got := c.of(tc.row); got != tc.want {
			t.Errorf("cluster: %s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
