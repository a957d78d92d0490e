package hourglasstest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimersArm covers ArmTimer: a new timer, the arguments it refuses,
// and arming again a key that is scheduled, fired or cancelled.
func exerciseTimersArm(t *testing.T, setup func(*testing.T) timerFixture) {
	t.Run("ArmNew", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.clock.Advance(1234 * time.Millisecond)
		now := f.clock.Now()
		fireAt := Epoch.Add(time.Hour + 1500*time.Microsecond) // stored to the millisecond
		seen := map[int64]bool{}
		for _, tt := range []struct {
			name   string
			p      hourglass.ArmTimerParams
			fireAt time.Time
		}{
			{"fire_at", hourglass.ArmTimerParams{Key: "at", FireAt: fireAt, Payload: json.RawMessage(`{ "b": [1, 2],  "a": {"c": "x y"} }`)}, ms(fireAt)},
			{"delay", hourglass.ArmTimerParams{Key: "delay", Delay: 2500 * time.Millisecond}, now.Add(2500 * time.Millisecond)},
			{"fire_at in the past", hourglass.ArmTimerParams{Key: "past", FireAt: Epoch, Payload: json.RawMessage(`{}`)}, now},
			{"delay 0", hourglass.ArmTimerParams{Key: "zero"}, now},
			{"every allowed character", hourglass.ArmTimerParams{Key: "aZ09._:-", Delay: time.Minute}, now.Add(time.Minute)},
			{"longest key and delay", hourglass.ArmTimerParams{Key: strings.Repeat("k", hourglass.MaxTimerKey), Delay: hourglass.MaxTimerDelay}, now.Add(hourglass.MaxTimerDelay)},
		} {
			tt.p.RequestHash = []byte(tt.name)
			got, created, err := f.ts.ArmTimer(f.ctx, tt.p)
			if err != nil || !created {
				t.Fatalf("%s: ArmTimer = %v (created=%v), want created", tt.name, err, created)
			}
			want := hourglass.Timer{ID: got.ID, Key: tt.p.Key, Status: hourglass.TimerScheduled, FireAt: tt.fireAt,
				Payload: tt.p.Payload, CreatedAt: now, UpdatedAt: now}
			if !hourglass.IsTimerID(got.ID) || seen[got.ID] || !sameTimer(got, want) {
				t.Fatalf("%s: armed %+v; want %+v with a new id >= TimerIDBase", tt.name, got, want)
			}
			seen[got.ID] = true
			// The payload comes back as given, and none stays none.
			if (got.Payload == nil) != (tt.p.Payload == nil) || tt.p.Payload != nil && compactJSON(t, got.Payload) != compactJSON(t, tt.p.Payload) {
				t.Fatalf("%s: payload %q, armed with %q", tt.name, got.Payload, tt.p.Payload)
			}
			stored := f.timer(t, tt.p.Key)
			if !sameTimer(stored, got) || (stored.Payload == nil) != (got.Payload == nil) {
				t.Fatalf("%s: Timer = %+v, ArmTimer returned %+v", tt.name, stored, got)
			}
		}
	})

	t.Run("ArmRefused", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		w := f.webhook(t, "w", hourglass.EventTimerFired)
		ok := hourglass.ArmTimerParams{Key: "k", Delay: time.Minute, RequestHash: []byte("h")}
		with := func(change func(*hourglass.ArmTimerParams)) hourglass.ArmTimerParams {
			p := ok
			change(&p)
			return p
		}
		for _, tt := range []struct {
			name string
			p    hourglass.ArmTimerParams
		}{
			{"no key", with(func(p *hourglass.ArmTimerParams) { p.Key = "" })},
			{"key with a space", with(func(p *hourglass.ArmTimerParams) { p.Key = "a b" })},
			{"key too long", with(func(p *hourglass.ArmTimerParams) { p.Key = strings.Repeat("k", hourglass.MaxTimerKey+1) })},
			{"negative delay", with(func(p *hourglass.ArmTimerParams) { p.Delay = -time.Millisecond })},
			{"delay too long", with(func(p *hourglass.ArmTimerParams) { p.Delay = hourglass.MaxTimerDelay + time.Millisecond })},
			{"payload not an object", with(func(p *hourglass.ArmTimerParams) { p.Payload = json.RawMessage(`[1]`) })},
			{"payload not JSON", with(func(p *hourglass.ArmTimerParams) { p.Payload = json.RawMessage(`{"a":`) })},
			{"payload too large", with(func(p *hourglass.ArmTimerParams) {
				p.Payload = json.RawMessage(`{"a":"` + strings.Repeat("x", hourglass.MaxTimerPayload) + `"}`)
			})},
			{"negative webhook id", with(func(p *hourglass.ArmTimerParams) { p.WebhookID = -1 })},
		} {
			if _, _, err := f.ts.ArmTimer(f.ctx, tt.p); hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
				t.Errorf("%s: %v, want invalid_argument", tt.name, err)
			}
		}
		missing := w.ID + 1000
		_, _, err := f.ts.ArmTimer(f.ctx, with(func(p *hourglass.ArmTimerParams) { p.WebhookID = missing }))
		wantCode(t, err, hourglass.CodeInvalidArgument)
		if msg := hourglass.ErrorMessage(err); !strings.Contains(msg, fmt.Sprint(missing)) {
			t.Errorf("unknown webhook message %q does not name %d", msg, missing)
		}
		_, err = f.ts.Timer(f.ctx, "k")
		wantCode(t, err, hourglass.CodeNotFound)
		if got, err := f.ts.Timers(f.ctx, hourglass.TimerFilter{Limit: 10}); err != nil || len(got) != 0 {
			t.Fatalf("Timers after refused arms = %+v, %v; want none", got, err)
		}
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(0, 0, 0)) {
			t.Fatalf("TimerCounts after refused arms = %v", got)
		}
		if got := f.timersDue(t, farFuture); len(got) != 0 {
			t.Fatalf("TimersDue after refused arms = %v", got)
		}
		// An existing webhook is accepted.
		got, _ := f.arm(t, with(func(p *hourglass.ArmTimerParams) { p.WebhookID = w.ID }))
		if got.WebhookID != w.ID {
			t.Fatalf("armed with webhook %d: %+v", w.ID, got)
		}
	})

	t.Run("RearmScheduled", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		w := f.webhook(t, "w", hourglass.EventTimerFired)
		p := hourglass.ArmTimerParams{Key: "k", Delay: time.Minute, Payload: json.RawMessage(`{"v":1}`), RequestHash: []byte("h1")}
		first, created := f.arm(t, p)
		if !created {
			t.Fatal("first arm: created=false")
		}
		// The same request again (a client's retry): nothing moves, not
		// even the fire time its delay would give now.
		f.clock.Advance(time.Second)
		again, created := f.arm(t, p)
		if created || !sameTimer(again, first) {
			t.Fatalf("repeat with the same hash = %+v (created=%v); want %+v unchanged", again, created, first)
		}
		if got := f.timer(t, "k"); !sameTimer(got, first) {
			t.Fatalf("Timer after the repeat = %+v, want %+v", got, first)
		}
		// Another hash: the new values, updated now, created kept.
		f.clock.Advance(time.Second)
		p2 := hourglass.ArmTimerParams{Key: "k", FireAt: Epoch.Add(time.Hour), Payload: json.RawMessage(`{"v": 2}`), WebhookID: w.ID, RequestHash: []byte("h2")}
		got, created := f.arm(t, p2)
		want := first
		want.FireAt, want.Payload, want.WebhookID, want.UpdatedAt = Epoch.Add(time.Hour), p2.Payload, w.ID, f.clock.Now()
		if created || !sameTimer(got, want) {
			t.Fatalf("re-arm with another hash = %+v (created=%v); want %+v", got, created, want)
		}
		if stored := f.timer(t, "k"); !sameTimer(stored, want) {
			t.Fatalf("Timer after the re-arm = %+v, want %+v", stored, want)
		}
		// And back to no payload and no webhook.
		f.clock.Advance(time.Second)
		got, created = f.arm(t, hourglass.ArmTimerParams{Key: "k", Delay: time.Second, RequestHash: []byte("h3")})
		want.FireAt, want.Payload, want.WebhookID, want.UpdatedAt = f.clock.Now().Add(time.Second), nil, 0, f.clock.Now()
		if created || !sameTimer(got, want) || got.Payload != nil {
			t.Fatalf("re-arm without payload or webhook = %+v (created=%v); want %+v", got, created, want)
		}
		if stored := f.timer(t, "k"); !sameTimer(stored, want) || stored.Payload != nil {
			t.Fatalf("Timer after the last re-arm = %+v, want %+v", stored, want)
		}
		if all := f.timers(t, hourglass.TimerFilter{Limit: 10}); len(all) != 1 {
			t.Fatalf("%d timers after re-arms of one key, want 1", len(all))
		}
	})

	t.Run("RearmFiredOrCancelled", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		p := hourglass.ArmTimerParams{Key: "fired", Delay: time.Second, RequestHash: []byte("h")}
		tm, _ := f.arm(t, p)
		f.clock.Advance(time.Second)
		first := f.fire(t, tm.ID)
		if len(first) != 1 {
			t.Fatalf("fire = %+v", first)
		}
		// The same request re-arms a fired timer: it is not scheduled.
		f.clock.Advance(time.Second)
		got, created := f.arm(t, p)
		want := tm
		want.FireAt, want.UpdatedAt = f.clock.Now().Add(time.Second), f.clock.Now()
		if created || !sameTimer(got, want) {
			t.Fatalf("re-arm of a fired timer = %+v (created=%v); want %+v (scheduled, fired_at cleared)", got, created, want)
		}
		if stored := f.timer(t, "fired"); !sameTimer(stored, want) {
			t.Fatalf("Timer after the re-arm = %+v, want %+v", stored, want)
		}
		f.clock.Advance(time.Second)
		second := f.fire(t, tm.ID)
		if len(second) != 1 || !second[0].FiredAt.Equal(f.clock.Now()) || !second[0].FireAt.Equal(want.FireAt) {
			t.Fatalf("second fire = %+v; want fired now at its new time %v", second, want.FireAt)
		}
		// One event per arming.
		evs := f.events(t, tm.ID)
		if got := eventTypes(evs); !slices.Equal(got, []hourglass.EventType{hourglass.EventTimerFired, hourglass.EventTimerFired}) {
			t.Fatalf("events of a timer fired twice: %v", got)
		}
		if evs[0].ID == evs[1].ID || !evs[0].CreatedAt.Equal(first[0].FiredAt) || !evs[1].CreatedAt.Equal(second[0].FiredAt) {
			t.Fatalf("events %+v; want two ids, at each fire", evs)
		}

		c, _ := f.arm(t, hourglass.ArmTimerParams{Key: "cancelled", Delay: time.Minute, RequestHash: []byte("h")})
		f.cancel(t, "cancelled")
		f.clock.Advance(time.Second)
		got, created = f.arm(t, hourglass.ArmTimerParams{Key: "cancelled", Delay: time.Minute, RequestHash: []byte("h")})
		want = c
		want.FireAt, want.UpdatedAt = f.clock.Now().Add(time.Minute), f.clock.Now()
		if created || !sameTimer(got, want) {
			t.Fatalf("re-arm of a cancelled timer = %+v (created=%v); want %+v", got, created, want)
		}
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(1, 1, 0)) {
			t.Fatalf("TimerCounts = %v, want 1 scheduled, 1 fired", got)
		}
	})
}
