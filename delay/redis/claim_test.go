package redis

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/hourglasstest"
	"github.com/hourglass/hourglass/internal/testenv"
)

// setupClaim opens a scheduler on a fresh namespace with a fake clock.
func setupClaim(t *testing.T, cfg Config) (*Scheduler, *hourglasstest.Clock) {
	t.Helper()
	raw := testenv.ServiceURL(t, "Redis", "HOURGLASS_TEST_REDIS_URL", URLDefault)
	clock := hourglasstest.NewClock(hourglasstest.Epoch)
	cfg.URL, cfg.Namespace, cfg.Clock = raw, hourglasstest.Namespace(t), clock
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.client.Del(context.Background(), s.keys()...)
		s.Close()
	})
	return s, clock
}

func ids(batch []claimed) []int64 {
	var out []int64
	for _, c := range batch {
		out = append(out, c.timer.ID)
	}
	slices.Sort(out)
	return out
}

func TestClaim(t *testing.T) {
	t.Parallel()
	base := hourglass.UnixMilli(hourglasstest.Epoch)
	for _, tc := range []struct {
		name      string
		deadlines map[int64]int64 // order id → ms after base
		at        int64           // claim at base+at
		batch     int
		want      []int64
		wantNext  int64 // ms after base; -1: nothing left
	}{
		{"nothing", nil, 0, 10, nil, -1},
		{"not yet due", map[int64]int64{1: 5}, 4, 10, nil, 5},
		{"due exactly at its deadline", map[int64]int64{1: 5}, 5, 10, []int64{1}, 5 + 3000}, // next: the lease
		{"only the due ones", map[int64]int64{1: 1, 2: 2, 3: 9}, 2, 10, []int64{1, 2}, 9},
		// Earliest first within a partition (1, 65 and 129 are in partition 1).
		{"at most batch, earliest first", map[int64]int64{1: 3, 65: 1, 129: 2}, 10, 2, []int64{65, 129}, 3},
		// Across partitions an equal share of the batch each first.
		{"a share from each partition", map[int64]int64{1: 1, 65: 1, 129: 1, 2: 3}, 10, 2, []int64{1, 2}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := setupClaim(t, Config{VisibilityTimeout: 3 * time.Second, Batch: tc.batch})
			var timers []hourglass.DueItem
			for id, d := range tc.deadlines {
				timers = append(timers, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(base + d)})
			}
			if err := s.Schedule(context.Background(), timers); err != nil {
				t.Fatal(err)
			}
			batch, next, err := s.claim(context.Background(), base+tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(batch); !slices.Equal(got, tc.want) {
				t.Fatalf("claimed %v, want %v", got, tc.want)
			}
			for _, c := range batch {
				if want := base + tc.deadlines[c.timer.ID]; hourglass.UnixMilli(c.timer.At) != want {
					t.Errorf("order %d claimed with deadline %d, want %d", c.timer.ID, hourglass.UnixMilli(c.timer.At), want)
				}
			}
			wantNext := tc.wantNext
			if wantNext >= 0 {
				wantNext += base
			}
			if next != wantNext {
				t.Fatalf("next %d, want %d", next, wantNext)
			}
		})
	}
}

// TestLeaseExpiryRequeues: a claimed batch that is never acknowledged (its
// consumer died) is claimable again, with its original deadlines, once the
// visibility timeout passes, and not before; an acknowledged one never.
func TestLeaseExpiryRequeues(t *testing.T) {
	t.Parallel()
	s, _ := setupClaim(t, Config{VisibilityTimeout: 3 * time.Second})
	ctx := context.Background()
	base := hourglass.UnixMilli(hourglasstest.Epoch)
	timers := []hourglass.DueItem{
		{ID: 1, At: hourglass.FromUnixMilli(base)},
		{ID: 2, At: hourglass.FromUnixMilli(base + 1)},
	}
	if err := s.Schedule(ctx, timers); err != nil {
		t.Fatal(err)
	}
	first, _, err := s.claim(ctx, base+1)
	if err != nil || len(first) != 2 {
		t.Fatalf("first claim: %v %v", first, err)
	}
	// A second consumer finds nothing while the lease holds.
	if again, next, err := s.claim(ctx, base+3000); err != nil || len(again) != 0 || next != base+3001 {
		t.Fatalf("claim before the lease expired: %v next %d %v", again, next, err)
	}
	s.ack(ctx, first[:1]) // order 1 delivered; order 2's consumer died
	again, _, err := s.claim(ctx, base+3001)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].timer != timers[1] {
		t.Fatalf("after the lease expired claimed %v, want order 2 with its deadline", again)
	}
	// A failed delivery shortens the lease to the backoff.
	s.lease(ctx, again, base+3100)
	if back, _, _ := s.claim(ctx, base+3099); len(back) != 0 {
		t.Fatalf("claimed %v before the backoff ended", back)
	}
	if back, _, _ := s.claim(ctx, base+3100); len(back) != 1 {
		t.Fatalf("claimed %v after the backoff, want order 2", back)
	}
}

// TestRequeueKeepsNewerTimer: a lease expiring does not overwrite a timer
// scheduled again for the same order meanwhile.
func TestRequeueKeepsNewerTimer(t *testing.T) {
	t.Parallel()
	s, _ := setupClaim(t, Config{VisibilityTimeout: time.Second})
	ctx := context.Background()
	base := hourglass.UnixMilli(hourglasstest.Epoch)
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 1, At: hourglass.FromUnixMilli(base)}}); err != nil {
		t.Fatal(err)
	}
	if b, _, err := s.claim(ctx, base); err != nil || len(b) != 1 {
		t.Fatalf("claim: %v %v", b, err)
	}
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 1, At: hourglass.FromUnixMilli(base + 5000)}}); err != nil {
		t.Fatal(err)
	}
	if b, next, err := s.claim(ctx, base+1000); err != nil || len(b) != 0 || next != base+5000 {
		t.Fatalf("claim after lease expiry: %v next %d %v; want nothing, next the newer deadline", b, next, err)
	}
}

func TestCancelRemovesTimer(t *testing.T) {
	t.Parallel()
	s, _ := setupClaim(t, Config{})
	ctx := context.Background()
	base := hourglass.UnixMilli(hourglasstest.Epoch)
	if err := s.Schedule(ctx, []hourglass.DueItem{{ID: 1, At: hourglass.FromUnixMilli(base)}, {ID: 2, At: hourglass.FromUnixMilli(base)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Cancel(ctx, []int64{2, 3}); err != nil {
		t.Fatal(err)
	}
	b, _, err := s.claim(ctx, base)
	if err != nil || !slices.Equal(ids(b), []int64{1}) {
		t.Fatalf("claimed %v %v, want [1]", ids(b), err)
	}
}

func TestMalformedMemberIsDropped(t *testing.T) {
	t.Parallel()
	s, _ := setupClaim(t, Config{})
	ctx := context.Background()
	base := hourglass.UnixMilli(hourglasstest.Epoch)
	timers, inflight := s.timersKey(5), s.inflightKey(5)
	if err := s.client.ZAdd(ctx, timers, goredis.Z{Score: float64(base), Member: "not-an-id"}, goredis.Z{Score: float64(base), Member: 5}).Err(); err != nil {
		t.Fatal(err)
	}
	b, _, err := s.claim(ctx, base)
	if err != nil || !slices.Equal(ids(b), []int64{5}) {
		t.Fatalf("claimed %v %v, want [5]", ids(b), err)
	}
	if n := s.client.ZCard(ctx, inflight).Val(); n != 1 {
		t.Fatalf("%d in flight, want 1 (the malformed member dropped)", n)
	}
	// Malformed in-flight members whose lease expired are dropped, not
	// requeued, and do not break the claim.
	if err := s.client.ZAdd(ctx, inflight, goredis.Z{Score: 0, Member: "x:"}, goredis.Z{Score: 0, Member: "y:abc"}, goredis.Z{Score: 0, Member: "nocolon"}).Err(); err != nil {
		t.Fatal(err)
	}
	if b, _, err := s.claim(ctx, base); err != nil || len(b) != 0 {
		t.Fatalf("claim with malformed in-flight members: %v %v", ids(b), err)
	}
	if n := s.client.ZCard(ctx, inflight).Val(); n != 1 {
		t.Fatalf("%d in flight, want 1", n)
	}
	if n := s.client.ZCard(ctx, timers).Val(); n != 0 {
		t.Fatalf("%d timers, want 0 (nothing malformed requeued)", n)
	}
}

func TestParseMember(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		id, ms  int64
		wantErr bool
	}{
		{"42:1700000000123", 42, 1700000000123, false},
		{"-3:5", -3, 5, false},
		{"42:1.700000000123e+12", 42, 1700000000123, false},
		{"42", 0, 0, true},
		{"x:5", 0, 0, true},
		{"42:", 0, 0, true},
		{"42:nan", 0, 0, true},
		{"42:-5", 0, 0, true},
	} {
		got, err := parseMember(tc.in)
		if tc.wantErr {
			if err == nil {
				t.Errorf("parseMember(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got.ID != tc.id || hourglass.UnixMilli(got.At) != tc.ms {
			t.Errorf("parseMember(%q) = %v, %v; want %d:%d", tc.in, got, err, tc.id, tc.ms)
		}
	}
}

// TestClaimOwnedPartitionsOnly: a process claims only the timers of the
// partitions it owns; the others stay for their owners; a partition
// gained is claimed at the next claim.
func TestClaimOwnedPartitionsOnly(t *testing.T) {
	t.Parallel()
	s, _ := setupClaim(t, Config{})
	ctx := context.Background()
	base := hourglass.UnixMilli(hourglasstest.Epoch)
	var timers []hourglass.DueItem
	for id := int64(1); id <= 2*hourglass.Partitions; id++ {
		timers = append(timers, hourglass.DueItem{ID: id, At: hourglass.FromUnixMilli(base)})
	}
	if err := s.Schedule(ctx, timers); err != nil {
		t.Fatal(err)
	}
	s.Own(hourglass.Parts{}) // none
	if b, next, err := s.claim(ctx, base); err != nil || len(b) != 0 || next != -1 {
		t.Fatalf("owning nothing: claimed %v next %d %v", ids(b), next, err)
	}
	s.Own(hourglass.Parts{3, 5})
	b, _, err := s.claim(ctx, base)
	if err != nil || !slices.Equal(ids(b), []int64{3, 5, 67, 69}) {
		t.Fatalf("owning 3 and 5: claimed %v %v, want [3 5 67 69]", ids(b), err)
	}
	s.Own(nil)
	b, _, err = s.claim(ctx, base)
	if err != nil || len(b) != len(timers)-4 {
		t.Fatalf("owning every partition: claimed %d %v, want the %d others", len(b), err, len(timers)-4)
	}
}

// TestMigratesUnpartitionedSets: timers an earlier version left in
// <ns>:timers, and its in-flight ones whose lease expired, move into their
// partitions' sets and are claimed there; a live lease stays.
func TestMigratesUnpartitionedSets(t *testing.T) {
	t.Parallel()
	s, _ := setupClaim(t, Config{})
	ctx := context.Background()
	base := hourglass.UnixMilli(hourglasstest.Epoch)
	if err := s.client.ZAdd(ctx, s.legacyTimers, goredis.Z{Score: float64(base), Member: 1}, goredis.Z{Score: float64(base + 10), Member: 66}).Err(); err != nil {
		t.Fatal(err)
	}
	expired, live := "2:"+strconv.FormatInt(base, 10), "3:"+strconv.FormatInt(base, 10)
	if err := s.client.ZAdd(ctx, s.legacyInflight, goredis.Z{Score: float64(base), Member: expired}, goredis.Z{Score: float64(base + 60_000), Member: live}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.migrate(ctx, base); err != nil {
		t.Fatal(err)
	}
	if n := s.client.ZCard(ctx, s.legacyTimers).Val(); n != 0 {
		t.Fatalf("%d timers left in the unpartitioned set", n)
	}
	if m := s.client.ZRange(ctx, s.legacyInflight, 0, -1).Val(); !slices.Equal(m, []string{live}) {
		t.Fatalf("in flight in the unpartitioned set: %v, want only the live lease %s", m, live)
	}
	if got := s.client.ZScore(ctx, s.timersKey(2), "66").Val(); got != float64(base+10) {
		t.Fatalf("order 66 in partition 2 with deadline %v, want %d", got, base+10)
	}
	s.Own(hourglass.Parts{1, 2})
	b, _, err := s.claim(ctx, base+10)
	if err != nil || !slices.Equal(ids(b), []int64{1, 2, 66}) {
		t.Fatalf("claimed %v %v, want [1 2 66]", ids(b), err)
	}
}
