package kafka

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestRoute(t *testing.T) {
	t.Parallel()
	ts := tiers()
	for _, tc := range []struct {
		remaining time.Duration
		want      string
	}{
		{-time.Hour, "due"},
		{0, "due"},
		{999 * time.Millisecond, "due"},
		{1249 * time.Millisecond, "due"},
		{1250 * time.Millisecond, "1s"},
		{10249 * time.Millisecond, "1s"},
		{10250 * time.Millisecond, "10s"},
		{time.Minute, "10s"},
		{time.Minute + 250*time.Millisecond, "1m"},
		{25 * time.Minute, "10m"},
		{2 * time.Hour, "1h"},
		{10*time.Hour + 250*time.Millisecond, "10h"},
		{7 * 24 * time.Hour, "10h"},
	} {
		if got := ts[route(ts, tc.remaining)].name; got != tc.want {
			t.Errorf("route(%s) = %s, want %s", tc.remaining, got, tc.want)
		}
	}
}

// TestRouteHops follows a timer through the tiers as the consumers forward
// it on time, and checks that it reaches the finest tier before its
// deadline with at least routeSlack to go, in the number of hops the
// package doc promises for 25 minutes.
func TestRouteHops(t *testing.T) {
	t.Parallel()
	ts := tiers()
	for _, tc := range []struct {
		delay time.Duration
		hops  int
	}{
		{500 * time.Millisecond, 0},
		{1500 * time.Millisecond, 1},
		{25*time.Minute - 20*time.Millisecond, 20},
		{7 * 24 * time.Hour, 51},
	} {
		remaining, hops := tc.delay, 0
		for i := route(ts, remaining); i > 0; i = route(ts, remaining) {
			remaining -= ts[i].hold
			hops++
		}
		if hops != tc.hops || (tc.delay > time.Second && remaining < routeSlack) {
			t.Errorf("delay %s: %d hops, %s left at the finest tier; want %d hops and >= %s left", tc.delay, hops, remaining, tc.hops, routeSlack)
		}
	}
}

func TestTimerValue(t *testing.T) {
	t.Parallel()
	v := timerValue{OrderID: 42, Deadline: 1_700_000_000_123, Release: 1_700_000_000_000}
	b := encodeTimers([]timerValue{v})
	if string(b) != "v1 42 1700000000123 1700000000000" {
		t.Fatalf("encode = %q", b)
	}
	got, err := decodeTimers(b)
	if err != nil || len(got) != 1 || got[0] != v {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, v)
	}
	pack := make([]timerValue, packMax)
	for i := range pack {
		pack[i] = timerValue{OrderID: int64(1<<40 + i), Deadline: 1_700_000_000_000 + int64(i), Release: 1_700_000_000_000}
	}
	b = encodeTimers(pack)
	if !strings.HasPrefix(string(b), "v2 1099511627776 1700000000000 1700000000000 1099511627777 ") || len(b) > 16<<10 {
		t.Fatalf("a full pack: %d bytes, %.80q", len(b), b)
	}
	if got, err := decodeTimers(b); err != nil || len(got) != packMax || got[9] != pack[9] || got[packMax-1] != pack[packMax-1] {
		t.Fatalf("decode of a pack = %d timers, %v", len(got), err)
	}
	tooMany := "v2" + strings.Repeat(" 1 2 3", packMax+1)
	for _, bad := range []string{"", "v1", "v1 1 2", "v2 1 2 3", "v1 x 2 3", "v1 1 2 3 4", "v1 1 2 3 4 5 6", "v2 1 2 3 4 5", "v3 1 2 3 4 5 6",
		"v2 1 2 3 4 x 6", `{"order":1}`, tooMany} {
		if _, err := decodeTimers([]byte(bad)); !errors.Is(err, errBadValue) {
			t.Errorf("decode(%.40q) = %v, want errBadValue", bad, err)
		}
	}
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		want string // seeds joined by ",", or the start of the error after "kafka: URL …: "
		ok   bool
	}{
		{"kafka://127.0.0.1:9092", "127.0.0.1:9092", true},
		{"kafka://a:1,b:2/", "a:1,b:2", true},
		{"kafka://broker", "broker:9092", true},
		{"kafka://[::1]:9093,[::1]", "[::1]:9093,[::1]:9092", true},
		{"", "the scheme must be kafka://", false},
		{"127.0.0.1:9092", "the scheme must be kafka://", false},
		{"amqp://h:1", "the scheme must be kafka://", false},
		{"kafka://", "no broker", false},
		{"kafka://h:1/topic", "only brokers may follow", false},
		{"kafka://user@h:1", "only brokers may follow", false},
		{"kafka://h:1,,h:2", `broker ""`, false},
		{"kafka://h:x", `broker "h:x": port must be 1-65535`, false},
		{"kafka://h:0", `broker "h:0": port must be 1-65535`, false},
		{"kafka://:9092", `broker ":9092" has no host`, false},
	} {
		seeds, err := parseURL(tc.url)
		switch {
		case tc.ok && (err != nil || strings.Join(seeds, ",") != tc.want):
			t.Errorf("parseURL(%q) = %v, %v; want %s", tc.url, seeds, err, tc.want)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("parseURL(%q) error = %v; want one containing %q", tc.url, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Config{URL: "kafka://h:1"}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"namespace", func(c *Config) { c.Namespace = "a b" }, "Namespace"},
		{"namespace ok", func(c *Config) { c.Namespace = "shop-1.eu_west" }, ""},
		{"retention", func(c *Config) { c.Retention = time.Hour }, "Retention must be between 24h0m0s"},
		{"timeout", func(c *Config) { c.Timeout = time.Millisecond }, "Timeout"},
		{"session", func(c *Config) { c.SessionTimeout = time.Millisecond }, "SessionTimeout"},
		{"partitions", func(c *Config) { c.Partitions = -1 }, "Partitions"},
		{"replication", func(c *Config) { c.ReplicationFactor = -1 }, "ReplicationFactor"},
		{"url", func(c *Config) { c.URL = "" }, "URL"},
	} {
		c := ok
		tc.edit(&c)
		err := c.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate() = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestTopicsAndGroups(t *testing.T) {
	t.Parallel()
	if got := strings.Join(Topics(""), " "); got != "hourglass.timers.due hourglass.timers.1s hourglass.timers.10s hourglass.timers.1m hourglass.timers.10m hourglass.timers.1h hourglass.timers.10h" {
		t.Errorf("Topics = %s", got)
	}
	if got := Groups("ns")[0]; got != "ns.timers.due.group" {
		t.Errorf("Groups[0] = %s", got)
	}
}

// dueAt returns a due function for timers whose order id indexes dues.
func dueAt(dues ...int64) func(timerValue) int64 {
	return func(v timerValue) int64 { return dues[v.OrderID] }
}

// one is a record of one timer, order id i (so due at dues[i]).
func one(i int64) []timerValue { return []timerValue{{OrderID: i}} }

// TestPartition drives one partition's bookkeeping: records done out of
// order are committed only up to the first one not done.
func TestPartition(t *testing.T) {
	t.Parallel()
	var p partition
	due := dueAt(300, 100, 200, 400)
	for i := range 4 {
		p.add(&kgo.Record{Offset: int64(10 + i)}, one(int64(i)), due)
	}
	p.add(&kgo.Record{Offset: 14}, nil, due) // undecodable: done at once
	if d, _ := p.nextDue(); d != 100 || p.held() != 4 || p.lastDue != 400 {
		t.Fatalf("nextDue %d held %d lastDue %d", d, p.held(), p.lastDue)
	}
	steps := []struct {
		now        int64
		popped     []int64 // offsets, in due order
		commitNext int64   // offset of the record to commit, -1 for none
	}{
		{99, nil, -1},
		{200, []int64{11, 12}, -1}, // offset 10 (due 300) is not done yet
		{300, []int64{10}, 12},
		{1000, []int64{13}, 14}, // through the undecodable record
		{2000, nil, -1},
	}
	for _, st := range steps {
		out := p.popDue(st.now, 10, nil)
		var offs []int64
		for _, it := range out {
			offs = append(offs, it.e.rec.Offset)
			it.finish()
		}
		if len(offs) != len(st.popped) || (len(offs) > 0 && !equal(offs, st.popped)) {
			t.Fatalf("now %d: popped %v, want %v", st.now, offs, st.popped)
		}
		r := p.advance()
		if got := int64(-1); r != nil {
			got = r.Offset
			if got != st.commitNext {
				t.Fatalf("now %d: commit through %d, want %d", st.now, got, st.commitNext)
			}
		} else if st.commitNext != -1 {
			t.Fatalf("now %d: nothing to commit, want through %d", st.now, st.commitNext)
		}
	}
	if len(p.entries) != 0 || p.held() != 0 {
		t.Fatalf("entries %d held %d after all done", len(p.entries), p.held())
	}
}

// TestPartitionPackedRecord: a packed record's timers come due one by one,
// and its offset is committed only once the last of them is done, a failed
// one requeued in between.
func TestPartitionPackedRecord(t *testing.T) {
	t.Parallel()
	var p partition
	due := dueAt(100, 300, 200, 50)
	p.add(&kgo.Record{Offset: 7}, []timerValue{{OrderID: 0}, {OrderID: 1}, {OrderID: 2}}, due)
	p.add(&kgo.Record{Offset: 8}, one(3), due)
	if p.held() != 4 {
		t.Fatalf("held %d timers, want 4", p.held())
	}
	// Due 50 (offset 8) and 100 (offset 7): both done, but 7 has two left.
	for _, it := range p.popDue(100, 10, nil) {
		it.finish()
	}
	if r := p.advance(); r != nil {
		t.Fatalf("committed through %d with two timers of offset 7 not done", r.Offset)
	}
	failed := p.popDue(200, 10, nil)
	if len(failed) != 1 || failed[0].timer.OrderID != 2 {
		t.Fatalf("due at 200: %+v", failed)
	}
	p.requeue(failed[0]) // its delivery failed
	var last *item
	for _, it := range p.popDue(300, 10, nil) {
		if it.timer.OrderID == 2 {
			last = it // the retried one: finished last
			continue
		}
		it.finish()
	}
	if r := p.advance(); r != nil || last == nil {
		t.Fatalf("committed %v with the retried timer of offset 7 not done", r)
	}
	last.finish()
	if r := p.advance(); r == nil || r.Offset != 8 || len(p.entries) != 0 || p.held() != 0 {
		t.Fatalf("after the last timer: commit through %v, %d entries, %d held; want 8, 0, 0", r, len(p.entries), p.held())
	}
}

func TestPartitionRequeueAndLimit(t *testing.T) {
	t.Parallel()
	var p partition
	at100 := func(timerValue) int64 { return 100 }
	for i := range 5 {
		p.add(&kgo.Record{Offset: int64(i)}, one(int64(i)), at100)
	}
	out := p.popDue(100, 3, nil)
	if len(out) != 3 || out[0].e.rec.Offset != 0 || out[2].e.rec.Offset != 2 {
		t.Fatalf("popDue with limit 3: %d timers", len(out))
	}
	for _, it := range out {
		p.requeue(it) // the delivery failed
	}
	if p.held() != 5 || p.advance() != nil {
		t.Fatalf("after requeue: held %d", p.held())
	}
}

func TestWantPause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		held      int
		lastDue   int64
		lookahead int64
		want      bool
	}{
		{"empty", 0, 0, 1000, false},
		{"newest due soon", 3, 1900, 1000, false},
		{"newest due later than the lookahead", 3, 2001, 1000, true},
		{"finest tier: no lookahead", 3, 9999, -1, false},
		{"full", maxHeld, 1000, 1000, true},
		{"finest tier full", maxHeld, 1000, -1, true},
	} {
		var p partition
		for i := range tc.held {
			p.add(&kgo.Record{Offset: int64(i)}, one(0), func(timerValue) int64 { return tc.lastDue })
		}
		if got := p.wantPause(1000, tc.lookahead, maxHeld); got != tc.want {
			t.Errorf("%s: wantPause = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
