package wheel

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
)

// unixMs is a realistic, unaligned clock origin (2023-11-14T22:13:20.123Z).
const unixMs int64 = 1_700_000_000_123

// fired is one fire callback, with the time the Advance call was given.
type fired struct {
	id       uint64
	deadline int64
	at       int64
}

// advance calls w.Advance(now) and checks what every Advance must satisfy:
// the returned count, non-decreasing deadlines, no deadline after the
// target, the timer gone before its callback, and the wheel's invariants.
func advance(t *testing.T, w *Wheel, now int64) []fired {
	t.Helper()
	var got []fired
	target := max(now, w.Now())
	n := w.Advance(now, func(id uint64, deadline int64) {
		if w.Contains(id) {
			t.Errorf("id %d still scheduled inside its fire callback", id)
		}
		got = append(got, fired{id, deadline, now})
	})
	if n != len(got) {
		t.Fatalf("Advance(%d) returned %d, fired %d", now, n, len(got))
	}
	for i, f := range got {
		if f.deadline > target {
			t.Fatalf("Advance(%d) fired id %d due at %d, after the target %d", now, f.id, f.deadline, target)
		}
		if i > 0 && f.deadline < got[i-1].deadline {
			t.Fatalf("Advance(%d) fired deadline %d after %d", now, f.deadline, got[i-1].deadline)
		}
	}
	if w.Now() != target {
		t.Fatalf("after Advance(%d): Now() = %d, want %d", now, w.Now(), target)
	}
	if err := w.checkInvariants(); err != nil {
		t.Fatalf("after Advance(%d): %v", now, err)
	}
	return got
}

// TestFiresOnceAtFirstAdvancePastDeadline schedules timers at awkward
// offsets (level boundaries, wraps, far deadlines) and checks, for two
// advance schedules, that each fires exactly once, at the first Advance
// whose time is at or after its deadline.
func TestFiresOnceAtFirstAdvancePastDeadline(t *testing.T) {
	t.Parallel()
	boundaries := []int64{1, 2, 62, 63, 64, 65, 127, 128, 4095, 4096, 4097,
		1<<18 - 1, 1 << 18, 1<<18 + 1, 1<<24 - 1, 1 << 24, 1<<24 + 1,
		1<<30 - 1, 1 << 30, 1<<30 + 1, 1<<36 - 1, 1 << 36, 1<<36 + 1}
	sevenDays := int64(7 * 24 * 3600 * 1000) // 604800000
	tests := []struct {
		name   string
		origin int64 // New(origin)
		start  int64 // offset the wheel is advanced to before adding
		offset []int64
	}{
		{"level boundaries", 0, 0, boundaries},
		{"level boundaries, unix origin", unixMs, 0, boundaries},
		{"level boundaries, negative origin", -5_000_000, 0, boundaries},
		{"level boundaries after advancing", 0, 1_000_003, plus(1_000_003, boundaries)},
		{"wrap of level 0", 0, 60, []int64{61, 62, 63, 64, 65, 66, 70, 127, 128}},
		{"wrap of level 1", 0, 4090, []int64{4091, 4095, 4096, 4097, 4100, 4159, 4160, 8191, 8192}},
		{"wrap of level 2", 0, 1<<18 - 5, []int64{1<<18 - 4, 1<<18 - 1, 1 << 18, 1<<18 + 1, 1<<18 + 64, 1<<18 + 4096}},
		{"wrap of the top level", 0, 1<<36 - 10, []int64{1<<36 - 5, 1<<36 - 1, 1 << 36, 1<<36 + 100, 1<<37 + 3}},
		{"seven days", unixMs, 0, []int64{sevenDays - 1, sevenDays, sevenDays + 1, 2 * sevenDays}},
		{"beyond 2^36", unixMs, 0, []int64{1<<36 + 12345, 1<<37 - 1, 1 << 40, 1<<50 + 7, 1 << 60}},
		{"same ms in many slots", 0, 0, []int64{5, 5, 5, 70, 70, 5000, 5000, 5000}},
		{"up to MaxInt64", 0, 0, []int64{1 << 62, math.MaxInt64 - 1, math.MaxInt64}},
		{"up to MaxInt64, unix origin", unixMs, 0, []int64{math.MaxInt64 - unixMs - 1, math.MaxInt64 - unixMs}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var deadlines []int64
			for _, o := range tt.offset {
				deadlines = append(deadlines, tt.origin+o)
			}
			// Schedule "exact": advance to d-1, d and d+1 for every deadline,
			// so a timer firing one ms early or late is caught.
			var exact []int64
			for _, d := range deadlines {
				exact = append(exact, d-1, d)
				if d < math.MaxInt64 {
					exact = append(exact, d+1)
				}
			}
			t.Run("exact", func(t *testing.T) {
				checkSchedule(t, tt.origin, tt.origin+tt.start, deadlines, exact)
			})
			// Schedule "coarse": random jumps of every magnitude.
			rng := rand.New(rand.NewPCG(1, uint64(len(tt.name))))
			var coarse []int64
			last := slices.Max(deadlines)
			for now := tt.origin + tt.start; now < last; {
				now += 1 + rng.Int64N(min(last-now, int64(1)<<rng.IntN(63)))
				coarse = append(coarse, now)
			}
			t.Run("coarse", func(t *testing.T) {
				checkSchedule(t, tt.origin, tt.origin+tt.start, deadlines, coarse)
			})
		})
	}
}

func plus(base int64, offsets []int64) []int64 {
	out := make([]int64, len(offsets))
	for i, o := range offsets {
		out[i] = base + o
	}
	return out
}

// checkSchedule creates New(origin), advances to start, adds one timer per
// deadline (ids are positions), advances through schedule (sorted here),
// and checks each timer fired once, at the first time at or after its
// deadline.
func checkSchedule(t *testing.T, origin, start int64, deadlines, schedule []int64) {
	t.Helper()
	w := New(origin)
	advance(t, w, start)
	for i, d := range deadlines {
		if !w.Add(uint64(i), d) {
			t.Fatalf("Add(%d, %d) reported an existing id", i, d)
		}
	}
	if err := w.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	schedule = slices.Clone(schedule)
	slices.Sort(schedule)
	firedAt := make(map[uint64]int64)
	for _, now := range schedule {
		for _, f := range advance(t, w, now) {
			if prev, dup := firedAt[f.id]; dup {
				t.Fatalf("id %d fired twice, at %d and %d", f.id, prev, now)
			}
			firedAt[f.id] = now
		}
	}
	for i, d := range deadlines {
		at, ok := firedAt[uint64(i)]
		if !ok {
			t.Errorf("id %d (deadline %d) never fired", i, d)
			continue
		}
		want := schedule[firstAtOrAfter(schedule, d)]
		if at != want {
			t.Errorf("id %d (deadline %d) fired at Advance(%d), want Advance(%d)", i, d, at, want)
		}
	}
	if w.Len() != 0 {
		t.Errorf("Len() = %d after all fired", w.Len())
	}
}

// firstAtOrAfter returns the index of the first schedule time >= d.
func firstAtOrAfter(schedule []int64, d int64) int {
	i, _ := slices.BinarySearch(schedule, d)
	return i
}

func TestSameMillisecondBatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		deadline int64 // offset from origin; the batch is cascaded from its level
	}{
		{"level 0", 40},
		{"level 1", 1000},
		{"level 3", 300000},
		{"overflow", 1<<36 + 99},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const n = 5000
			w := New(unixMs)
			d := unixMs + tt.deadline
			for i := range uint64(n) {
				w.Add(i, d)
				w.Add(n+i, d+1)
			}
			advance(t, w, d-1) // must fire nothing: checked by the count below
			if w.Len() != 2*n {
				t.Fatalf("Len() = %d before the deadline", w.Len())
			}
			if got := advance(t, w, d); len(got) != n {
				t.Fatalf("Advance(deadline) fired %d, want %d", len(got), n)
			}
			if got := advance(t, w, d+1); len(got) != n {
				t.Fatalf("Advance(deadline+1) fired %d, want %d", len(got), n)
			}
		})
	}
}

func TestPastDeadlinesFireOnNextAdvance(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		next int64 // the Advance after the Adds, relative to the wheel's time
	}{
		{"same time", 0},
		{"earlier time", -500},
		{"later time", 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New(unixMs)
			advance(t, w, unixMs+10_000)
			now := w.Now()
			w.Add(1, now)         // exactly now
			w.Add(2, now-1)       // just past
			w.Add(3, unixMs-5000) // before the wheel's origin
			w.Add(4, math.MinInt64)
			w.Add(5, now+1) // not due
			if nd, ok := w.NextDeadline(); !ok || nd > math.MinInt64 {
				t.Errorf("NextDeadline() = %d, %v; want MinInt64, true", nd, ok)
			}
			got := advance(t, w, now+tt.next)
			var ids []uint64
			for _, f := range got {
				ids = append(ids, f.id)
			}
			want := []uint64{4, 3, 2, 1} // deadline order
			if tt.next > 0 {
				want = append(want, 5)
			}
			if !slices.Equal(ids, want) {
				t.Errorf("fired %v, want %v", ids, want)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	// Every case starts from ids 1..6 scheduled at base+deadline[id-1] on a
	// wheel at base, where id 4 is overdue and ids 5 and 6 share a level-0
	// slot; it cancels ids, then checks which fire by base+1<<40.
	base := unixMs
	deadlines := []int64{10, 5000, 1<<36 + 1, -3, 7, 7}
	tests := []struct {
		name      string
		cancel    []uint64
		cancelled []bool // Cancel's results
		wantFired []uint64
	}{
		{"nothing", nil, nil, []uint64{4, 5, 6, 1, 2, 3}},
		{"level 0", []uint64{1}, []bool{true}, []uint64{4, 5, 6, 2, 3}},
		{"higher level", []uint64{2}, []bool{true}, []uint64{4, 5, 6, 1, 3}},
		{"overflow", []uint64{3}, []bool{true}, []uint64{4, 5, 6, 1, 2}},
		{"overdue", []uint64{4}, []bool{true}, []uint64{5, 6, 1, 2, 3}},
		{"head of a shared slot", []uint64{6}, []bool{true}, []uint64{4, 5, 1, 2, 3}},
		{"tail of a shared slot", []uint64{5}, []bool{true}, []uint64{4, 6, 1, 2, 3}},
		{"unknown id", []uint64{99}, []bool{false}, []uint64{4, 5, 6, 1, 2, 3}},
		{"twice", []uint64{2, 2}, []bool{true, false}, []uint64{4, 5, 6, 1, 3}},
		{"all", []uint64{1, 2, 3, 4, 5, 6}, []bool{true, true, true, true, true, true}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New(base)
			for i, d := range deadlines {
				w.Add(uint64(i+1), base+d)
			}
			for i, id := range tt.cancel {
				if got := w.Cancel(id); got != tt.cancelled[i] {
					t.Errorf("Cancel(%d) = %v, want %v", id, got, tt.cancelled[i])
				}
				if w.Contains(id) {
					t.Errorf("Contains(%d) after Cancel", id)
				}
			}
			if err := w.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			if w.Len() != len(tt.wantFired) {
				t.Errorf("Len() = %d, want %d", w.Len(), len(tt.wantFired))
			}
			var ids []uint64
			for now := base; w.Len() > 0; {
				nd, _ := w.NextDeadline()
				now = max(now, nd)
				for _, f := range advance(t, w, now) {
					ids = append(ids, f.id)
				}
			}
			// Ids 5 and 6 share a deadline, so either order is right.
			if i := slices.Index(ids, 6); i >= 0 && i+1 < len(ids) && ids[i+1] == 5 {
				ids[i], ids[i+1] = 5, 6
			}
			if !slices.Equal(ids, tt.wantFired) {
				t.Errorf("fired %v, want %v", ids, tt.wantFired)
			}
		})
	}
}

func TestAddReplacesDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		first, then int64 // offsets from the wheel's time
	}{
		{"earlier, same level", 50, 20},
		{"later, same level", 20, 50},
		{"earlier, lower level", 1 << 20, 30},
		{"later, higher level", 30, 1 << 20},
		{"into the past", 1 << 20, -5},
		{"out of the past", -5, 1 << 20},
		{"into overflow", 30, 1 << 37},
		{"out of overflow", 1 << 37, 30},
		{"same deadline", 77, 77},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New(unixMs)
			w.Add(2, unixMs+40) // a neighbour that must be unaffected
			if !w.Add(1, unixMs+tt.first) {
				t.Fatal("first Add reported an existing id")
			}
			if w.Add(1, unixMs+tt.then) {
				t.Fatal("second Add reported a new id")
			}
			if d, ok := w.Deadline(1); !ok || d != unixMs+tt.then {
				t.Fatalf("Deadline(1) = %d, %v; want %d", d, ok, unixMs+tt.then)
			}
			if w.Len() != 2 {
				t.Fatalf("Len() = %d, want 2", w.Len())
			}
			schedule := []int64{unixMs + tt.first - 1, unixMs + tt.first, unixMs + tt.then - 1, unixMs + tt.then, unixMs + 40}
			slices.Sort(schedule)
			got := map[uint64][]int64{}
			for _, now := range schedule {
				for _, f := range advance(t, w, now) {
					got[f.id] = append(got[f.id], max(now, unixMs))
				}
			}
			if want := max(unixMs, unixMs+tt.then); !slices.Equal(got[1], []int64{want}) {
				t.Errorf("id 1 fired at %v, want once at %d", got[1], want)
			}
			if !slices.Equal(got[2], []int64{unixMs + 40}) {
				t.Errorf("neighbour fired at %v, want once at %d", got[2], unixMs+40)
			}
		})
	}
}

func TestReAddAfterFire(t *testing.T) {
	t.Parallel()
	w := New(0)
	w.Add(7, 100)
	if got := advance(t, w, 100); len(got) != 1 {
		t.Fatalf("fired %d, want 1", len(got))
	}
	if w.Contains(7) || w.Cancel(7) {
		t.Fatal("fired id still scheduled")
	}
	if !w.Add(7, 5000) {
		t.Fatal("re-Add of a fired id reported an existing id")
	}
	if got := advance(t, w, 4999); len(got) != 0 {
		t.Fatalf("fired %v before the deadline", got)
	}
	if got := advance(t, w, 5000); len(got) != 1 || got[0] != (fired{7, 5000, 5000}) {
		t.Fatalf("fired %v, want id 7 at 5000", got)
	}
}

// TestFireCallbackReentrancy checks Add and Cancel from inside fire.
func TestFireCallbackReentrancy(t *testing.T) {
	t.Parallel()
	type step struct {
		now  int64
		want []fired // in order; same-deadline runs compared as sets
	}
	tests := []struct {
		name   string
		timers map[uint64]int64
		// onFire runs inside the callback for the fired id.
		onFire func(w *Wheel, id uint64)
		steps  []step
	}{
		{
			name:   "cancel a same-ms sibling",
			timers: map[uint64]int64{1: 10, 2: 10},
			onFire: func(w *Wheel, id uint64) { w.Cancel(3 - id) },
			steps:  []step{{10, []fired{{0, 10, 10}}}}, // id 0: either one
		},
		{
			name:   "cancel a later timer in range",
			timers: map[uint64]int64{1: 10, 2: 5000},
			onFire: func(w *Wheel, id uint64) { w.Cancel(2) },
			steps:  []step{{10000, []fired{{1, 10, 10000}}}},
		},
		{
			name:   "re-add self later in range",
			timers: map[uint64]int64{1: 10},
			onFire: func(w *Wheel, id uint64) {
				if d := w.Now(); d < 3000 {
					w.Add(id, d+1000)
				}
			},
			steps: []step{{5000, []fired{{1, 10, 5000}, {1, 1010, 5000}, {1, 2010, 5000}, {1, 3010, 5000}}}},
		},
		{
			name:   "re-add self at now fires on the next Advance",
			timers: map[uint64]int64{1: 10},
			onFire: func() func(w *Wheel, id uint64) {
				once := false
				return func(w *Wheel, id uint64) {
					if !once {
						once = true
						w.Add(id, w.Now())
					}
				}
			}(),
			steps: []step{{10, []fired{{1, 10, 10}}}, {10, []fired{{1, 10, 10}}}, {11, nil}},
		},
		{
			name:   "add beyond the target",
			timers: map[uint64]int64{1: 10},
			onFire: func(w *Wheel, id uint64) {
				if id == 1 {
					w.Add(2, 20_000)
				}
			},
			steps: []step{{10_000, []fired{{1, 10, 10_000}}}, {20_000, []fired{{2, 20_000, 20_000}}}},
		},
		{
			name:   "postpone a same-ms sibling",
			timers: map[uint64]int64{1: 10, 2: 10},
			onFire: func(w *Wheel, id uint64) {
				if other := 3 - id; w.Contains(other) {
					w.Add(other, 70)
				}
			},
			steps: []step{{100, []fired{{0, 10, 100}, {0, 70, 100}}}},
		},
		{
			name:   "pull a far timer into range",
			timers: map[uint64]int64{1: 10, 2: 1 << 40},
			onFire: func(w *Wheel, id uint64) {
				if id == 1 {
					w.Add(2, 50)
				}
			},
			steps: []step{{60, []fired{{1, 10, 60}, {2, 50, 60}}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New(0)
			for id, d := range tt.timers {
				w.Add(id, d)
			}
			for _, s := range tt.steps {
				var got []fired
				w.Advance(s.now, func(id uint64, deadline int64) {
					if now := w.Now(); now != deadline {
						t.Errorf("Now() = %d inside the callback for deadline %d", now, deadline)
					}
					got = append(got, fired{id, deadline, s.now})
					tt.onFire(w, id)
				})
				if err := w.checkInvariants(); err != nil {
					t.Fatal(err)
				}
				if len(got) != len(s.want) {
					t.Fatalf("Advance(%d) fired %v, want %v", s.now, got, s.want)
				}
				for i := range got {
					if s.want[i].id == 0 { // any id
						got[i].id = 0
					}
				}
				if !slices.Equal(got, s.want) {
					t.Fatalf("Advance(%d) fired %v, want %v", s.now, got, s.want)
				}
			}
		})
	}
}

func TestAdvanceFromCallbackPanics(t *testing.T) {
	t.Parallel()
	w := New(0)
	w.Add(1, 5)
	defer func() {
		if recover() == nil {
			t.Fatal("re-entrant Advance did not panic")
		}
		// The guard is released, so the wheel stays usable.
		w.Add(2, 10)
		if got := advance(t, w, 10); len(got) != 1 || got[0].id != 2 {
			t.Fatalf("after the panic: fired %v, want id 2", got)
		}
	}()
	w.Advance(5, func(uint64, int64) { w.Advance(6, nil) })
}

func TestPanickingCallbackKeepsWheelConsistent(t *testing.T) {
	t.Parallel()
	w := New(0)
	for id := range uint64(10) {
		w.Add(id, 100)
		w.Add(100+id, 200)
	}
	calls := 0
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("callback panic was swallowed")
			}
		}()
		w.Advance(300, func(uint64, int64) {
			calls++
			if calls == 4 {
				panic("boom")
			}
		})
	}()
	if err := w.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	if w.Len() != 16 || w.Now() != 100 {
		t.Fatalf("after the panic: Len() = %d, Now() = %d; want 16, 100", w.Len(), w.Now())
	}
	got := advance(t, w, 300)
	if len(got) != 16 {
		t.Fatalf("next Advance fired %d, want the 16 left", len(got))
	}
}

func TestNextDeadline(t *testing.T) {
	t.Parallel()
	// The wheel's time: 100 ms into a 4096 ms block, so 36 ms into a 64 ms
	// one. Origin 0 keeps slot starts plain multiples of 64^L.
	const now = 1_700_000_000_000&^4095 + 100
	tests := []struct {
		name     string
		deadline []int64 // offsets from now
		want     int64   // offset of NextDeadline's result
	}{
		{"level 0 is exact", []int64{5, 9, 20}, 5},
		{"level 0 end of block", []int64{27}, 27},
		{"level 1 gives the slot start", []int64{1000}, 1000 - (100+1000)%64},
		{"lower level first", []int64{1 << 30, 300, 1 << 20}, 300 - (100+300)%64},
		{"overdue gives the earliest", []int64{-7, -3, 50}, -7},
		{"overflow gives its block start", []int64{1 << 37}, (now+1<<37)>>36<<36 - now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := New(0)
			advance(t, w, now)
			if _, ok := w.NextDeadline(); ok {
				t.Fatal("NextDeadline() ok on an empty wheel")
			}
			for i, d := range tt.deadline {
				w.Add(uint64(i), now+d)
			}
			nd, ok := w.NextDeadline()
			if !ok || nd != now+tt.want {
				t.Fatalf("NextDeadline() = %d (offset %d), %v; want offset %d", nd, nd-now, ok, tt.want)
			}
			if earliest := now + slices.Min(tt.deadline); nd > earliest {
				t.Fatalf("NextDeadline() %d after the earliest deadline %d", nd, earliest)
			}
		})
	}
}

// TestNextDeadlineJumps drives a wheel only by NextDeadline, as a service
// sleeping between timers would, and checks each timer fires exactly at its
// deadline in few steps.
func TestNextDeadlineJumps(t *testing.T) {
	t.Parallel()
	w := New(unixMs)
	deadlines := []int64{3, 64, 4097, 600_000, 604_800_000, 1<<36 + 5, 1 << 45}
	for i, d := range deadlines {
		w.Add(uint64(i), unixMs+d)
	}
	steps := 0
	for i := 0; w.Len() > 0; {
		nd, ok := w.NextDeadline()
		if !ok {
			t.Fatal("NextDeadline() not ok on a non-empty wheel")
		}
		if nd <= w.Now() {
			t.Fatalf("NextDeadline() = %d, not after Now() %d, with nothing overdue", nd, w.Now())
		}
		steps++
		for _, f := range advance(t, w, nd) {
			if f.id != uint64(i) || f.deadline != nd {
				t.Fatalf("Advance(%d) fired id %d (deadline %d), want id %d", nd, f.id, f.deadline, i)
			}
			i++
		}
	}
	// Each timer needs at most one step per level it cascades through.
	if limit := len(deadlines) * (numLevels + 1); steps > limit {
		t.Errorf("took %d steps, want at most %d", steps, limit)
	}
}

// TestIndexChurn exercises the id index's growth and backward-shift
// deletion with sequential ids, the shape of real order ids.
func TestIndexChurn(t *testing.T) {
	t.Parallel()
	w := New(0)
	const n = 20000
	for id := range uint64(n) {
		w.Add(id, int64(1+id%1000))
	}
	for id := uint64(0); id < n; id += 3 {
		if !w.Cancel(id) {
			t.Fatalf("Cancel(%d) = false", id)
		}
	}
	if err := w.checkInvariants(); err != nil {
		t.Fatal(err)
	}
	for id := range uint64(n) {
		d, ok := w.Deadline(id)
		if want := id%3 != 0; ok != want || (ok && d != int64(1+id%1000)) {
			t.Fatalf("Deadline(%d) = %d, %v", id, d, ok)
		}
	}
	// Reuse freed entries: the slab must not grow.
	entries := len(w.entries)
	for id := uint64(0); id < n; id += 3 {
		w.Add(n+id, 5)
	}
	if len(w.entries) != entries {
		t.Errorf("slab grew from %d to %d although freed entries were available", entries, len(w.entries))
	}
	if err := w.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestRandomizedAgainstModel runs long random sequences of Add, Cancel,
// Advance (with re-entrant callbacks) and NextDeadline against a simple
// model, checking every fire, its order, and every answer.
func TestRandomizedAgainstModel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		origin int64
		seed   uint64
	}{
		{"zero origin", 0, 1},
		{"unix origin", unixMs, 2},
		{"negative origin", -1 << 40, 3},
	}
	ops := 200_000
	if testing.Short() {
		ops = 20_000
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runModel(t, tt.origin, tt.seed, ops)
		})
	}
}

// model is the reference: a map of pending timers plus a min-heap of them
// with lazy deletion (a heap item is live iff its seq matches the map).
type model struct {
	now      int64
	pending  map[uint64]modelTimer
	byTime   modelHeap
	deferred []uint64 // added inside fire at or before the clock: eligible next Advance
	seq      uint64
}

type modelTimer struct {
	deadline int64
	seq      uint64
	deferred bool
}

type modelItem struct {
	deadline int64
	id, seq  uint64
}

type modelHeap []modelItem

func (h modelHeap) Len() int           { return len(h) }
func (h modelHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h modelHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *modelHeap) Push(x any)        { *h = append(*h, x.(modelItem)) }
func (h *modelHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// add schedules id; inside Advance, a deadline at or before clock is held
// back until the next Advance.
func (m *model) add(id uint64, deadline int64, inAdvance bool, clock int64) bool {
	_, existed := m.pending[id]
	m.seq++
	mt := modelTimer{deadline: deadline, seq: m.seq, deferred: inAdvance && deadline <= clock}
	m.pending[id] = mt
	if mt.deferred {
		m.deferred = append(m.deferred, id)
	} else {
		heap.Push(&m.byTime, modelItem{deadline, id, m.seq})
	}
	return !existed
}

func (m *model) cancel(id uint64) bool {
	_, ok := m.pending[id]
	delete(m.pending, id)
	return ok
}

// min returns the earliest eligible deadline.
func (m *model) min() (int64, bool) {
	for len(m.byTime) > 0 {
		top := m.byTime[0]
		if mt, ok := m.pending[top.id]; ok && mt.seq == top.seq {
			return top.deadline, true
		}
		heap.Pop(&m.byTime)
	}
	return 0, false
}

// minAll returns the earliest deadline of any pending timer, eligible or
// held back.
func (m *model) minAll() (int64, bool) {
	earliest, ok := m.min()
	for _, id := range m.deferred {
		if mt, live := m.pending[id]; live && mt.deferred && (!ok || mt.deadline < earliest) {
			earliest, ok = mt.deadline, true
		}
	}
	return earliest, ok
}

// endAdvance makes the held-back timers eligible.
func (m *model) endAdvance() {
	for _, id := range m.deferred {
		if mt, ok := m.pending[id]; ok && mt.deferred {
			mt.deferred = false
			m.pending[id] = mt
			heap.Push(&m.byTime, modelItem{mt.deadline, id, mt.seq})
		}
	}
	m.deferred = m.deferred[:0]
}

func runModel(t *testing.T, origin int64, seed uint64, ops int) {
	rng := rand.New(rand.NewPCG(seed, 0x7157))
	w := New(origin)
	m := &model{now: origin, pending: map[uint64]modelTimer{}}
	const idSpace = 20000
	// The run cycles through three phases of 10000 ops, so the wheel is
	// exercised both crowded and sparse: filling (small clock steps),
	// mixed, and draining (large steps, frequent Advance).
	phase := 0

	// delta returns a deadline offset of a randomly chosen magnitude,
	// favouring level boundaries.
	delta := func() int64 {
		switch r := rng.IntN(100); {
		case r < 10:
			return -rng.Int64N(5000) // already due
		case r < 15:
			return 0
		case r < 40:
			return rng.Int64N(64)
		case r < 60:
			return rng.Int64N(4096)
		case r < 75:
			return rng.Int64N(1 << 20)
		case r < 90: // next to a boundary of level 1..6
			return int64(1)<<(6*(1+rng.IntN(6))) + rng.Int64N(5) - 2
		case r < 97:
			return rng.Int64N(1 << 30)
		default:
			return rng.Int64N(1 << 38)
		}
	}
	// step returns how far an Advance moves the clock.
	step := func() int64 {
		r := rng.IntN(100)
		if phase == 0 {
			r = rng.IntN(50)
		}
		switch {
		case r < 5:
			return 0
		case r < 10:
			return -rng.Int64N(100) // backwards: fires only the overdue
		case r < 25:
			return 1
		case r < 50:
			return rng.Int64N(64)
		case r < 70:
			return rng.Int64N(4096)
		case r < 85:
			return rng.Int64N(1 << 18)
		case r < 95:
			if nd, ok := w.NextDeadline(); ok {
				return max(nd-w.Now(), 0)
			}
			return 1
		case r < 99:
			return rng.Int64N(1 << 26)
		default:
			return rng.Int64N(1 << 38)
		}
	}

	firedTotal, pendingSum, pendingMax := 0, 0, 0
	for op := range ops {
		phase = op / 10000 % 3
		r := rng.IntN(100)
		if phase == 2 && r < 65 && rng.IntN(2) == 0 {
			r = 99 // Advance
		}
		switch {
		case r < 45:
			id := rng.Uint64N(idSpace)
			d := m.now + delta()
			if got, want := w.Add(id, d), m.add(id, d, false, 0); got != want {
				t.Fatalf("op %d: Add(%d, %d) = %v, want %v", op, id, d, got, want)
			}
		case r < 60:
			id := rng.Uint64N(idSpace)
			if got, want := w.Cancel(id), m.cancel(id); got != want {
				t.Fatalf("op %d: Cancel(%d) = %v, want %v", op, id, got, want)
			}
		case r < 65:
			id := rng.Uint64N(idSpace)
			mt, want := m.pending[id]
			if d, ok := w.Deadline(id); ok != want || (ok && d != mt.deadline) {
				t.Fatalf("op %d: Deadline(%d) = %d, %v; want %d, %v", op, id, d, ok, mt.deadline, want)
			}
		default:
			target := m.now + step()
			limit := max(target, m.now)
			oldNow := m.now
			n := 0
			got := w.Advance(target, func(id uint64, deadline int64) {
				n++
				clock := max(oldNow, deadline)
				mt, ok := m.pending[id]
				switch {
				case !ok || mt.deadline != deadline || mt.deferred:
					t.Fatalf("op %d: fired id %d at %d, model has %+v, %v", op, id, deadline, mt, ok)
				case deadline > limit:
					t.Fatalf("op %d: fired id %d due at %d beyond %d", op, id, deadline, limit)
				case w.Now() != clock:
					t.Fatalf("op %d: Now() = %d in callback for %d, want %d", op, w.Now(), deadline, clock)
				case w.Contains(id):
					t.Fatalf("op %d: id %d still scheduled in its callback", op, id)
				}
				if earliest, _ := m.min(); deadline != earliest {
					t.Fatalf("op %d: fired deadline %d, but %d is earlier", op, deadline, earliest)
				}
				delete(m.pending, id)
				// Inside a callback NextDeadline must still be a lower bound.
				if nd, ok := w.NextDeadline(); ok != (len(m.pending) > 0) {
					t.Fatalf("op %d: NextDeadline() ok = %v in callback with %d pending", op, ok, len(m.pending))
				} else if earliest, has := m.minAll(); has && nd > earliest {
					t.Fatalf("op %d: NextDeadline() = %d in callback, after the earliest deadline %d", op, nd, earliest)
				}
				// Re-entrant calls, mirrored in the model.
				switch r := rng.IntN(100); {
				case r < 10: // re-arm self
					d := clock + rng.Int64N(200) - 5
					w.Add(id, d)
					m.add(id, d, true, clock)
				case r < 20:
					other := rng.Uint64N(idSpace)
					if got, want := w.Cancel(other), m.cancel(other); got != want {
						t.Fatalf("op %d: Cancel(%d) in callback = %v, want %v", op, other, got, want)
					}
				case r < 30:
					other := rng.Uint64N(idSpace)
					d := clock + delta()
					if got, want := w.Add(other, d), m.add(other, d, true, clock); got != want {
						t.Fatalf("op %d: Add(%d, %d) in callback = %v, want %v", op, other, d, got, want)
					}
				}
			})
			if got != n {
				t.Fatalf("op %d: Advance returned %d, fired %d", op, got, n)
			}
			firedTotal += n
			if earliest, ok := m.min(); ok && earliest <= limit {
				t.Fatalf("op %d: Advance(%d) left a timer due at %d", op, target, earliest)
			}
			m.endAdvance()
			m.now = limit
		}

		if w.Len() != len(m.pending) {
			t.Fatalf("op %d: Len() = %d, want %d", op, w.Len(), len(m.pending))
		}
		if w.Now() != m.now {
			t.Fatalf("op %d: Now() = %d, want %d", op, w.Now(), m.now)
		}
		checkNextDeadline(t, op, w, m)
		pendingSum += w.Len()
		pendingMax = max(pendingMax, w.Len())
		if op%5000 == 0 {
			if err := w.checkInvariants(); err != nil {
				t.Fatalf("op %d: %v", op, err)
			}
		}
	}
	t.Logf("%d ops, %d fired, %d pending on average, %d at most", ops, firedTotal, pendingSum/ops, pendingMax)
}

// checkNextDeadline compares NextDeadline with the model: never after the
// earliest deadline, after Now unless something is overdue, and exact when
// the earliest timer is in the clock's 64 ms block.
func checkNextDeadline(t *testing.T, op int, w *Wheel, m *model) {
	t.Helper()
	nd, ok := w.NextDeadline()
	earliest, want := m.min()
	if ok != want {
		t.Fatalf("op %d: NextDeadline() ok = %v, want %v", op, ok, want)
	}
	if !ok {
		return
	}
	if nd > earliest {
		t.Fatalf("op %d: NextDeadline() = %d, after the earliest deadline %d (now %d, invariants: %v)", op, nd, earliest, m.now, w.checkInvariants())
	}
	if earliest > m.now {
		if nd <= m.now {
			t.Fatalf("op %d: NextDeadline() = %d, not after now %d, with nothing overdue", op, nd, m.now)
		}
		if w.tickAt(earliest)>>bitsPerLevel == w.tickAt(m.now)>>bitsPerLevel && nd != earliest {
			t.Fatalf("op %d: NextDeadline() = %d, want exactly %d (level 0)", op, nd, earliest)
		}
	}
}

// TestMemoryPerTimer measures the heap held per timer with a million timers
// spread over the next ten minutes, the service's working shape.
func TestMemoryPerTimer(t *testing.T) {
	// Not parallel: other tests' allocations would pollute the measurement.
	const n = 1_000_000
	perTimer := measureWheelBytes(n)
	t.Logf("wheel: %.1f bytes/timer with %d timers", perTimer, n)
	if perTimer > 56 {
		t.Errorf("wheel holds %.1f bytes/timer, want at most 56", perTimer)
	}
}

// measureWheelBytes returns the heap held per timer by a wheel holding n
// timers spread over ten minutes.
func measureWheelBytes(n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := New(unixMs)
	rng := rand.New(rand.NewPCG(42, 42))
	for id := range uint64(n) {
		w.Add(1_000_000_000+id, unixMs+1+rng.Int64N(10*60*1000))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(w)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}
