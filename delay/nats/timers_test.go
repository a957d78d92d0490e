package nats

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_700_000_000_000)
	const hold, lead = 10 * time.Second, 5 * time.Second
	tests := []struct {
		name     string
		deadline time.Time
		act      action
		wait     time.Duration
	}{
		{"past", now.Add(-time.Hour), deliverNow, 0},
		{"this millisecond", now, deliverNow, 0},
		{"one ms ahead", now.Add(time.Millisecond), holdLocal, time.Millisecond},
		{"edge of the hold window", now.Add(hold), holdLocal, hold},
		{"just past the hold window", now.Add(hold + time.Millisecond), nakLater, hold + time.Millisecond - lead},
		{"half an hour", now.Add(30 * time.Minute), nakLater, 30*time.Minute - lead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			act, wait := classify(now, tt.deadline, hold, lead)
			if act != tt.act || wait != tt.wait {
				t.Fatalf("classify = %d, %s; want %d, %s", act, wait, tt.act, tt.wait)
			}
			// A nak'd message must come back inside the hold window and
			// before its deadline.
			if act == nakLater && (tt.deadline.Sub(now)-wait > hold || wait <= 0) {
				t.Fatalf("nak delay %s does not bring the message back inside the hold window", wait)
			}
		})
	}
}

func TestScheduleAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	const lead = 2 * time.Second
	tests := []struct {
		name     string
		deadline time.Time
		at       time.Time
		ok       bool
	}{
		{"due now", now, now.Add(-lead), false},
		{"within lead plus a second", now.Add(lead + 999*time.Millisecond), now, false},
		{"lead plus a second", now.Add(lead + time.Second), now.Add(time.Second), true},
		{"milliseconds round down", now.Add(time.Minute + 1999*time.Millisecond), now.Add(59 * time.Second), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, ok := scheduleAt(now, tt.deadline, lead)
			if ok != tt.ok || (ok && !at.Equal(tt.at)) {
				t.Fatalf("scheduleAt = %v, %v; want %v, %v", at, ok, tt.at, tt.ok)
			}
			if ok && (at.After(tt.deadline.Add(-lead)) || at.Nanosecond() != 0) {
				t.Fatalf("release %v is not a whole second at least %s before %v", at, lead, tt.deadline)
			}
		})
	}
}

func TestSupportsSchedules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		version string
		want    bool
	}{
		{"2.9.10", false},
		{"2.11.4", false},
		{"2.12.0", true},
		{"v2.14.0-RC.1", true},
		{"2.15.2", true},
		{"3.0.0", true},
		{"", false},
		{"garbage", false},
	}
	for _, tt := range tests {
		if got := supportsSchedules(tt.version); got != tt.want {
			t.Errorf("supportsSchedules(%q) = %v, want %v", tt.version, got, tt.want)
		}
	}
}

func TestNamesFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ns, stream, due string
	}{
		{"hourglass", "hourglass-timers", "hourglass.timers.due"},
		{"hgt-Test-1", "hgt-Test-1-timers", "hgt-Test-1.timers.due"},
		{"shop.eu west/>*", "shop_eu_west___-timers", "shop_eu_west___.timers.due"},
		{"", "_-timers", "_.timers.due"},
	}
	for _, tt := range tests {
		n := namesFor(tt.ns)
		if n.stream != tt.stream || n.due != tt.due || n.consumer != strings.TrimSuffix(tt.stream, "-timers")+"-closer" {
			t.Errorf("namesFor(%q) = %+v; want stream %q, due %q", tt.ns, n, tt.stream, tt.due)
		}
		if got := n.schedSubject(12); got != strings.TrimSuffix(tt.due, "due")+"sched.12" {
			t.Errorf("schedSubject = %q", got)
		}
	}
}

func TestTimerEncoding(t *testing.T) {
	t.Parallel()
	want := hourglass.DueItem{ID: 123, At: hourglass.FromUnixMilli(1_700_000_000_123)}
	got, err := decodeTimer(encodeTimer(want))
	if err != nil || got.ID != want.ID || !got.At.Equal(want.At) {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"", "not json", `{"order_id":0,"deadline_ms":5}`, `{"order_id":5}`} {
		if _, err := decodeTimer([]byte(bad)); err == nil {
			t.Errorf("decodeTimer(%q) succeeded", bad)
		}
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n    int
		want time.Duration
	}{
		{1, 100 * time.Millisecond},
		{2, 200 * time.Millisecond},
		{4, 800 * time.Millisecond},
		{7, 5 * time.Second},
		{1000, 5 * time.Second},
	}
	for _, tt := range tests {
		if got := retryDelay(tt.n, 5*time.Second); got != tt.want {
			t.Errorf("retryDelay(%d) = %s, want %s", tt.n, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"defaults", Config{}, ""},
		{"short ack wait", Config{AckWait: 500 * time.Millisecond}, "ack wait"},
		{"hold beyond half the ack wait", Config{AckWait: 10 * time.Second}, "hold window"},
		{"nak lead beyond the hold window", Config{NakLead: time.Minute}, "nak lead"},
		{"schedule lead too close to the hold window", Config{ScheduleLead: 9500 * time.Millisecond}, "schedule lead"},
		{"tiny max ack pending", Config{MaxAckPending: 10}, "max ack pending"},
		{"replicas", Config{Replicas: 7}, "replicas"},
		{"fetch wait", Config{FetchWait: time.Minute}, "fetch wait"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("Validate = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"nats://u:pw@h:4222", "nats://u:xxxxx@h:4222"},
		{"nats://tok@h:4222", "nats://xxxxx@h:4222"},
		{"nats://a:1,nats://u:pw@b:2", "nats://a:1,nats://u:xxxxx@b:2"},
	}
	for _, tt := range tests {
		if got := redact.URL(tt.in); got != tt.want {
			t.Errorf("redact.URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
