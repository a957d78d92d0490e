package hourglass

import (
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/strictjson"
)

// Work bounds of TimerArm.Params per input byte, as the API's decoders
// have (api/fuzz_test.go): the scanner's steps beyond reading each byte
// once, and the bytes allocated, whoever allocates them.
const (
	maxArmWorkPerByte  = 16
	maxArmWorkConst    = 256
	maxArmAllocPerByte = 16
	maxArmAllocConst   = 64 << 10
)

// FuzzTimerArm: the rules every arm keeps, PUT /v1/timers/{key}'s and a
// shop's timer_requests row's alike. Whatever the key, payload, times,
// delay and webhook, Params answers an invalid_argument *Error with a
// message, or parameters that pass Validate, fire at most MaxTimerDelay
// after now (a requested_at after now counting as now), and hold a payload
// that is one JSON object of text every store keeps; and it costs at most
// a constant per byte.
func FuzzTimerArm(f *testing.F) {
	f.Add("order:1", []byte(`{"a":1}`), int64(0), int64(1000), int64(0), uint8(1), int64(0))
	f.Add("k", []byte(`{"a":"\u0000"}`), int64(0), int64(0), int64(0), uint8(1), int64(0))
	f.Add("k", []byte(`{"a":"\ud800"}`), int64(0), int64(0), int64(3), uint8(1), int64(1e15))
	f.Add("k", []byte(`{"a":1,"a":2}`), int64(1e12), int64(0), int64(0), uint8(0), int64(0))
	f.Add("k", []byte(`{"a":-0} `), int64(-1), int64(0), int64(-1), uint8(0), int64(-1e12))
	f.Add("k", []byte(strings.Repeat(`{"a":`, 70)), int64(253402300800000), int64(0), int64(0), uint8(0), int64(0))
	f.Add("k/é", []byte(`null`), int64(0), int64(31536000001), int64(1), uint8(3), int64(6e15))
	now := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, key string, payload []byte, fireAtMs, delayMs, webhook int64, mode uint8, requestedMs int64) {
		a := TimerArm{Key: key, Payload: payload}
		if mode&1 != 0 {
			a.DelayMs = &delayMs
		}
		if mode&2 != 0 || mode&1 == 0 {
			at := time.UnixMilli(fireAtMs).UTC()
			a.FireAt = &at
		}
		if webhook != 0 {
			a.WebhookID = &webhook
		}
		if mode&4 != 0 {
			a.RequestedAt = time.UnixMilli(requestedMs).UTC()
		}
		if mode&8 != 0 {
			a.Payload = nil
		}
		var (
			p   ArmTimerParams
			err error
		)
		alloc := allocatedBy(func() { p, err = a.Params(now) })
		size := len(key) + len(payload)
		if alloc > uint64(maxArmAllocPerByte*size+maxArmAllocConst) {
			t.Fatalf("Params allocated %d bytes for %d bytes of input (bound %d per byte + %d)", alloc, size, maxArmAllocPerByte, maxArmAllocConst)
		}
		if st, _ := strictjson.Scan(payload, nil); st.Work > maxArmWorkPerByte*len(payload)+maxArmWorkConst {
			t.Fatalf("the payload's scan took %d steps for %d bytes (bound %d per byte + %d)", st.Work, len(payload), maxArmWorkPerByte, maxArmWorkConst)
		}
		if err != nil {
			var he *Error
			if !errors.As(err, &he) || he.Code != CodeInvalidArgument || he.Message == "" {
				t.Fatalf("error %#v is not an invalid_argument *Error with a message", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted parameters Validate refuses: %v", err)
		}
		fireAt := p.FireAt
		if fireAt.IsZero() {
			fireAt = now.Add(p.Delay)
		}
		if fireAt.After(now.Add(MaxTimerDelay)) {
			t.Fatalf("fire_at %s is more than %s after %s", fireAt, MaxTimerDelay, now)
		}
		if len(p.RequestHash) == 0 {
			t.Fatal("no request hash")
		}
		if p.Payload != nil {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(p.Payload, &obj); err != nil || obj == nil || !json.Valid(p.Payload) {
				t.Fatalf("accepted a payload that is not one JSON object: %q", p.Payload)
			}
			if strings.Contains(string(p.Payload), `\u0000`) || TextProblem(string(p.Payload)) != "" {
				t.Fatalf("accepted a payload no store keeps alike: %q", p.Payload)
			}
		}
	})
}

// allocatedBy returns the bytes the process allocated while fn ran.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestTimerArmRequestedAt: a delay counts from requested_at, or from now
// when requested_at lies after it (issue 37: delay_ms 0 with requested_at
// in the year 200000 armed a timer for that year); the API's arm (no
// requested_at) keeps its delay for the store's now.
func TestTimerArmRequestedAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	ms := int64(1000)
	for _, tc := range []struct {
		requested time.Time
		want      time.Time
	}{
		{now.Add(-time.Minute), now.Add(-time.Minute + time.Second)},
		{now.AddDate(198000, 0, 0), now.Add(time.Second)},
		{now.Add(time.Hour), now.Add(time.Second)},
	} {
		p, err := TimerArm{Key: "k", DelayMs: &ms, RequestedAt: tc.requested}.Params(now)
		if err != nil || !p.FireAt.Equal(tc.want) || p.Delay != 0 {
			t.Errorf("requested_at %s: fire_at %s, delay %s, %v; want fire_at %s", tc.requested, p.FireAt, p.Delay, err, tc.want)
		}
	}
	p, err := TimerArm{Key: "k", DelayMs: &ms}.Params(now)
	if err != nil || !p.FireAt.IsZero() || p.Delay != time.Second {
		t.Errorf("the API's arm: %+v, %v; want a delay of 1 s", p, err)
	}
	far := now.Add(MaxTimerDelay + time.Millisecond)
	if _, err := (TimerArm{Key: "k", FireAt: &far}).Params(now); ErrorCode(err) != CodeInvalidArgument || !strings.HasPrefix(ErrorMessage(err), "fire_at: must be at most 365 days ahead") {
		t.Errorf("a fire_at a year and 1 ms ahead: %v; want refused", err)
	}
}
