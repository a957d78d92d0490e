// Package wheel is a hierarchical timing wheel with millisecond ticks:
// it holds millions of timers, each keyed by a uint64 id (in hourglass, an
// order id), and says which are due when the clock advances.
//
// Time is an input. The wheel never reads the clock, never starts a
// goroutine and never uses time.Timer: the caller passes the current time,
// in int64 milliseconds (unix ms in hourglass), to New and Advance, and uses
// NextDeadline to learn how long it may sleep.
//
// # Layout
//
// The wheel has six levels of 64 slots. A slot at level L spans 64^L ms, so
// level 0 has one slot per millisecond, level 1 one per 64 ms, and the top
// level (5) one per 2^30 ms (about 12 days); together they cover 2^36 ms
// (about 795 days). Slotting is by absolute time, as in tokio's timer wheel:
// write a time as base-64 digits (counting from the time given to New); a
// timer lives at the level of the most significant digit in which its
// deadline differs from the current time, in the slot named by its
// deadline's digit at that level. Every timer in a level-0 slot therefore
// has exactly the same deadline, and a higher-level slot holds timers whose
// deadlines share a range of 64^L ms.
//
// Worked example, on a wheel created with New(0):
//
//	call            deadline in base-64 digits       placed at
//	Add(a, 50)      50     = (50)                    level 0, slot 50 (50 exactly)
//	Add(b, 1000)    1000   = (15, 40)                level 1, slot 15 (960..1023)
//	Add(c, 300000)  300000 = (1, 9, 15, 32)          level 3, slot 1 (262144..524287)
//	                       = 1*64^3 + 9*64^2 + 15*64 + 32
//
// Advance(1000) finds the first occupied slot of the lowest occupied level
// (level 0, slot 50), jumps the clock to 50 and fires a; then it jumps to
// 960, the start of level-1 slot 15, and cascades that slot: b is placed
// again relative to the new time, landing in level-0 slot 40; the clock
// jumps to 1000 and fires b. Advance(300000) then jumps to 262144 (level-3
// slot 1) and cascades c to level-2 slot 9 (starting at 299008), then to
// level-1 slot 15 (299968), then to level-0 slot 32, and fires it at 300000.
// Four jumps instead of 299000 ticks: the clock only ever visits occupied
// slots, found from a 64-bit occupancy bitmap per level with one
// bits.TrailingZeros64.
//
// Every occupied slot of level L starts inside the clock's current block of
// 64^(L+1) ms and after the clock (the clock stops at each occupied slot's
// start to cascade it, never passing one), while every occupied slot of a
// higher level starts at or after the end of that block. So the next slot
// in time is the first set bit of the lowest non-empty bitmap, with no scan
// of timers and no rotation of the bitmap.
//
// Two lists sit outside the levels. A deadline at or before the current time
// (on Add, or for a fired callback's re-Add) goes to the due list and fires
// on the next Advance, in deadline order. A deadline beyond the top level's
// current 2^36 ms block (at most 795 days ahead) goes to the overflow list,
// which acts as a seventh level with a single slot: it is cascaded when the
// clock reaches the start of the top-level block holding its earliest
// deadline, so a timer of any distance, up to math.MaxInt64, fires
// correctly, and the clock can jump any distance in one Advance without
// visiting the empty blocks in between.
//
// # Cost of each operation
//
//   - Add, Cancel, Deadline, Contains: amortised O(1) (a hash lookup and a
//     doubly-linked-list splice; the slab and the index grow geometrically).
//   - Advance: O(f + s + c), where f is the number of timers fired, s the
//     number of non-empty slots visited, and c the number of cascades; a
//     timer is cascaded at most once per level (five times), plus once per
//     visit of the overflow list while it is beyond the levels' range, so
//     the cost per fired timer is bounded however far the clock jumps.
//     Empty milliseconds cost nothing. Already-due timers are sorted by
//     deadline (O(d log d) for d of them, in place).
//   - NextDeadline: O(1) (at most seven bitmap tests).
//   - Len, Now: O(1).
//
// # Memory
//
// A timer costs no heap allocation of its own: timers live in a slab of
// 24-byte entries linked into intrusive lists by int32 index, and the id
// index is an open-addressing table of int32 entry indices (load factor at
// most 0.7, so 5.7 to 11.4 bytes per timer). Measured with a million timers:
// 36 bytes per timer, against 162 for pending time.AfterFunc timers with
// their closures; for any large wheel it stays between about 30 and 42.
// Memory grows to the peak number of timers and is kept (like a Go map's)
// until the wheel is dropped; freed entries are reused first. A wheel holds
// at most math.MaxInt32 timers.
//
// The slab costs cache misses rather than allocations: Advance follows each
// slot's list through the slab, so firing timers whose entries are
// scattered (deadlines added in random order) costs a few cache misses per
// timer, and timers added in deadline order, as orders created over time
// are, cost far fewer.
//
// # Use
//
// The order service holds one mutex around the wheel. Request handlers call
// Add and Cancel. One goroutine loops: NextDeadline, sleep until then (or
// until woken by an Add whose deadline is earlier than the one it sleeps
// for), then Advance(clock now) with a callback that collects the due ids to
// close after releasing the mutex. Advance may be called late or early: it
// fires exactly the timers due by the time it is given, in deadline order.
//
// # Concurrency
//
// A Wheel is not safe for concurrent use: the caller serialises every call,
// typically under one mutex that it also holds while acting on fired ids.
// The fire callback of Advance runs on the caller's goroutine, inside
// Advance, and may call Add, Cancel and the read methods, but not Advance.
package wheel
