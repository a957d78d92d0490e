package heap

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkInvariants verifies the heap order and that the index names every
// entry's position and nothing else.
func (q *queue) checkInvariants() error {
	if len(q.index) != len(q.items) {
		return fmt.Errorf("index holds %d ids, heap %d entries", len(q.index), len(q.items))
	}
	for i, e := range q.items {
		if j, ok := q.index[e.id]; !ok || j != i {
			return fmt.Errorf("id %d at %d, index says %d (%v)", e.id, i, j, ok)
		}
		if i > 0 && e.before(q.items[(i-1)/2]) {
			return fmt.Errorf("entry %d %v is before its parent %v", i, e, q.items[(i-1)/2])
		}
	}
	return nil
}

type op struct {
	kind     string // add, remove, pop
	id       int64
	deadline int64 // add: the deadline; pop: now
}

type pop struct{ id, deadline int64 }

func TestQueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ops  []op
		want []pop // everything popped, in order
		len  int   // timers left
	}{
		{
			name: "pops in deadline order, equal deadlines by id",
			ops:  []op{{"add", 3, 30}, {"add", 1, 10}, {"add", 7, 20}, {"add", 2, 20}, {"pop", 0, 100}},
			want: []pop{{1, 10}, {2, 20}, {7, 20}, {3, 30}},
		},
		{
			name: "pops only what is due, boundary included",
			ops:  []op{{"add", 1, 10}, {"add", 2, 11}, {"add", 3, 12}, {"pop", 0, 11}},
			want: []pop{{1, 10}, {2, 11}},
			len:  1,
		},
		{
			name: "nothing due",
			ops:  []op{{"add", 1, 10}, {"pop", 0, 9}},
			len:  1,
		},
		{
			name: "re-add moves a timer earlier",
			ops:  []op{{"add", 1, 10}, {"add", 2, 20}, {"add", 3, 30}, {"add", 3, 5}, {"pop", 0, 10}},
			want: []pop{{3, 5}, {1, 10}},
			len:  1,
		},
		{
			name: "re-add moves a timer later",
			ops:  []op{{"add", 1, 10}, {"add", 2, 20}, {"add", 1, 25}, {"pop", 0, 20}},
			want: []pop{{2, 20}},
			len:  1,
		},
		{
			name: "re-add with the same deadline keeps one timer",
			ops:  []op{{"add", 1, 10}, {"add", 1, 10}, {"pop", 0, 10}},
			want: []pop{{1, 10}},
		},
		{
			name: "remove the head, a leaf and an unknown id",
			ops:  []op{{"add", 1, 10}, {"add", 2, 20}, {"add", 3, 30}, {"add", 4, 40}, {"remove", 1, 0}, {"remove", 4, 0}, {"remove", 99, 0}, {"pop", 0, 100}},
			want: []pop{{2, 20}, {3, 30}},
		},
		{
			name: "remove then add again",
			ops:  []op{{"add", 1, 10}, {"remove", 1, 0}, {"add", 1, 15}, {"pop", 0, 100}},
			want: []pop{{1, 15}},
		},
		{
			name: "negative and far deadlines",
			ops:  []op{{"add", 1, 1 << 62}, {"add", 2, -5}, {"add", 3, 0}, {"pop", 0, 0}},
			want: []pop{{2, -5}, {3, 0}},
			len:  1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			q := newQueue()
			var got []pop
			for _, o := range tt.ops {
				switch o.kind {
				case "add":
					q.Add(o.id, o.deadline)
				case "remove":
					q.Remove(o.id)
				case "pop":
					q.PopDue(o.deadline, func(id, d int64) { got = append(got, pop{id, d}) })
				}
				if err := q.checkInvariants(); err != nil {
					t.Fatalf("after %v: %v", o, err)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("popped %v, want %v", got, tt.want)
			}
			if q.Len() != tt.len {
				t.Errorf("Len() = %d, want %d", q.Len(), tt.len)
			}
		})
	}
}

// TestQueueAgainstModel runs random adds, re-adds, removes and pops against
// a map that is searched linearly, the obviously correct delay queue.
func TestQueueAgainstModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, seed))
		q := newQueue()
		model := map[int64]int64{}
		now := int64(0)
		for step := range 5000 {
			switch r := rng.IntN(10); {
			case r < 5:
				id, d := rng.Int64N(500), now+rng.Int64N(200)
				q.Add(id, d)
				model[id] = d
			case r < 7:
				id := rng.Int64N(500)
				_, want := model[id]
				if got := q.Remove(id); got != want {
					t.Fatalf("seed %d step %d: Remove(%d) = %v, want %v", seed, step, id, got, want)
				}
				delete(model, id)
			default:
				now += rng.Int64N(30)
				var want []pop
				for id, d := range model {
					if d <= now {
						want = append(want, pop{id, d})
						delete(model, id)
					}
				}
				slices.SortFunc(want, func(a, b pop) int {
					return entry{a.deadline, a.id}.cmp(entry{b.deadline, b.id})
				})
				var got []pop
				n := q.PopDue(now, func(id, d int64) { got = append(got, pop{id, d}) })
				if n != len(got) || !slices.Equal(got, want) {
					t.Fatalf("seed %d step %d: PopDue(%d) = %d %v, want %v", seed, step, now, n, got, want)
				}
			}
			if err := q.checkInvariants(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if q.Len() != len(model) {
				t.Fatalf("seed %d step %d: Len() = %d, want %d", seed, step, q.Len(), len(model))
			}
			next, ok := q.Next()
			if ok != (len(model) > 0) {
				t.Fatalf("seed %d step %d: Next ok = %v with %d timers", seed, step, ok, len(model))
			}
			for _, d := range model {
				if d < next {
					t.Fatalf("seed %d step %d: Next() = %d, but %d is held", seed, step, next, d)
				}
			}
		}
	}
}

func (a entry) cmp(b entry) int {
	switch {
	case a.before(b):
		return -1
	case b.before(a):
		return 1
	}
	return 0
}

// TestQueueCompacts checks that storage follows the pending count down
// after a burst, and that nothing is lost by the rebuild.
func TestQueueCompacts(t *testing.T) {
	t.Parallel()
	q := newQueue()
	const n = 4 * compactMin
	for i := range int64(n) {
		q.Add(i, i)
	}
	q.PopDue(n-compactMin/2-1, func(int64, int64) {})
	if err := q.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if q.Len() != compactMin/2 {
		t.Fatalf("Len() = %d, want %d", q.Len(), compactMin/2)
	}
	if c := cap(q.items); c > 2*q.Len() {
		t.Errorf("capacity %d after falling to %d timers: not compacted", c, q.Len())
	}
	var got []int64
	q.PopDue(n, func(id, _ int64) { got = append(got, id) })
	if len(got) != compactMin/2 || got[0] != n-compactMin/2 || !slices.IsSorted(got) {
		t.Errorf("after compaction popped %d ids from %d", len(got), got[0])
	}
}
