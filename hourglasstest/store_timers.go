package hourglasstest

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
)

// exerciseTimers covers hourglass.TimerStore: ArmTimer, Timer, Timers,
// CancelTimer, FireTimers, TimersDue and TimerCounts, what a fire writes
// (one timer.fired event and its webhook deliveries) and what an arming
// writes (the outbox, the created feed between nodes). Timer ids share the
// columns that carry an order id, so the cases also check that orders and
// timers never leak into each other's scans. Skipped for stores that do not
// implement hourglass.TimerStore yet.
func exerciseTimers(t *testing.T, h StoreHarness) {
	setup := func(t *testing.T) timerFixture { return withTimers(t, setupStore(t, h)) }

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
			want := hourglass.NamedTimer{ID: got.ID, Key: tt.p.Key, Status: hourglass.TimerScheduled, FireAt: tt.fireAt,
				Payload: tt.p.Payload, CreatedAt: now, UpdatedAt: now}
			if !hourglass.IsTimerID(got.ID) || seen[got.ID] || !sameNamedTimer(got, want) {
				t.Fatalf("%s: armed %+v; want %+v with a new id >= TimerIDBase", tt.name, got, want)
			}
			seen[got.ID] = true
			// The payload comes back as given, and none stays none.
			if (got.Payload == nil) != (tt.p.Payload == nil) || tt.p.Payload != nil && compactJSON(t, got.Payload) != compactJSON(t, tt.p.Payload) {
				t.Fatalf("%s: payload %q, armed with %q", tt.name, got.Payload, tt.p.Payload)
			}
			stored := f.timer(t, tt.p.Key)
			if !sameNamedTimer(stored, got) || (stored.Payload == nil) != (got.Payload == nil) {
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
		if created || !sameNamedTimer(again, first) {
			t.Fatalf("repeat with the same hash = %+v (created=%v); want %+v unchanged", again, created, first)
		}
		if got := f.timer(t, "k"); !sameNamedTimer(got, first) {
			t.Fatalf("Timer after the repeat = %+v, want %+v", got, first)
		}
		// Another hash: the new values, updated now, created kept.
		f.clock.Advance(time.Second)
		p2 := hourglass.ArmTimerParams{Key: "k", FireAt: Epoch.Add(time.Hour), Payload: json.RawMessage(`{"v": 2}`), WebhookID: w.ID, RequestHash: []byte("h2")}
		got, created := f.arm(t, p2)
		want := first
		want.FireAt, want.Payload, want.WebhookID, want.UpdatedAt = Epoch.Add(time.Hour), p2.Payload, w.ID, f.clock.Now()
		if created || !sameNamedTimer(got, want) {
			t.Fatalf("re-arm with another hash = %+v (created=%v); want %+v", got, created, want)
		}
		if stored := f.timer(t, "k"); !sameNamedTimer(stored, want) {
			t.Fatalf("Timer after the re-arm = %+v, want %+v", stored, want)
		}
		// And back to no payload and no webhook.
		f.clock.Advance(time.Second)
		got, created = f.arm(t, hourglass.ArmTimerParams{Key: "k", Delay: time.Second, RequestHash: []byte("h3")})
		want.FireAt, want.Payload, want.WebhookID, want.UpdatedAt = f.clock.Now().Add(time.Second), nil, 0, f.clock.Now()
		if created || !sameNamedTimer(got, want) || got.Payload != nil {
			t.Fatalf("re-arm without payload or webhook = %+v (created=%v); want %+v", got, created, want)
		}
		if stored := f.timer(t, "k"); !sameNamedTimer(stored, want) || stored.Payload != nil {
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
		if created || !sameNamedTimer(got, want) {
			t.Fatalf("re-arm of a fired timer = %+v (created=%v); want %+v (scheduled, fired_at cleared)", got, created, want)
		}
		if stored := f.timer(t, "fired"); !sameNamedTimer(stored, want) {
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
		if created || !sameNamedTimer(got, want) {
			t.Fatalf("re-arm of a cancelled timer = %+v (created=%v); want %+v", got, created, want)
		}
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(1, 1, 0)) {
			t.Fatalf("TimerCounts = %v, want 1 scheduled, 1 fired", got)
		}
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		s, _ := f.arm(t, hourglass.ArmTimerParams{Key: "s", Delay: time.Minute, Payload: json.RawMessage(`{"a":1}`), RequestHash: []byte("h")})
		f.clock.Advance(time.Second)
		got := f.cancel(t, "s")
		want := s
		want.Status, want.UpdatedAt = hourglass.TimerCancelled, f.clock.Now()
		if !sameNamedTimer(got, want) {
			t.Fatalf("CancelTimer = %+v, want %+v", got, want)
		}
		f.clock.Advance(time.Second)
		if again := f.cancel(t, "s"); !sameNamedTimer(again, want) {
			t.Fatalf("CancelTimer again = %+v, want %+v unchanged", again, want)
		}
		if stored := f.timer(t, "s"); !sameNamedTimer(stored, want) {
			t.Fatalf("Timer after cancels = %+v, want %+v", stored, want)
		}
		fired, _ := f.arm(t, hourglass.ArmTimerParams{Key: "f", Delay: time.Second, RequestHash: []byte("h")})
		f.clock.Advance(time.Second)
		f.fire(t, fired.ID)
		before := f.timer(t, "f")
		_, err := f.ts.CancelTimer(f.ctx, "f")
		if !errors.Is(err, hourglass.ErrTimerFired) {
			t.Fatalf("CancelTimer(fired) = %v, want ErrTimerFired", err)
		}
		wantCode(t, err, hourglass.CodeTimerFired)
		if after := f.timer(t, "f"); !sameNamedTimer(after, before) || after.Status != hourglass.TimerFired {
			t.Fatalf("a refused cancel changed the timer: %+v, was %+v", after, before)
		}
		_, err = f.ts.CancelTimer(f.ctx, "nope")
		wantCode(t, err, hourglass.CodeNotFound)
		// A cancelled timer is neither due nor fired, even long after its time.
		f.clock.Advance(time.Hour)
		if got := f.fire(t, s.ID); len(got) != 0 {
			t.Fatalf("FireTimers fired a cancelled timer: %+v", got)
		}
		if got := f.timersDue(t, farFuture); len(got) != 0 {
			t.Fatalf("TimersDue = %v; want no cancelled or fired timer", got)
		}
		if evs := f.events(t, s.ID); len(evs) != 0 {
			t.Fatalf("a cancelled timer has events %v", eventTypes(evs))
		}
	})

	t.Run("TimerAndTimers", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		_, err := f.ts.Timer(f.ctx, "nope")
		wantCode(t, err, hourglass.CodeNotFound)
		// Bytewise: digits, upper case, '_', lower case; '-' and '.' before ':'.
		keys := []string{"b", "a", "B", "a.2", "a-1", "_z", "0", "a:1", "ab", "Z9"}
		byKey := map[string]hourglass.NamedTimer{}
		for _, k := range keys {
			byKey[k], _ = f.arm(t, hourglass.ArmTimerParams{Key: k, Delay: time.Second, RequestHash: []byte(k)})
		}
		status := map[string]hourglass.TimerStatus{}
		for _, k := range keys {
			status[k] = hourglass.TimerScheduled
		}
		for _, k := range []string{keys[1], keys[4]} {
			f.cancel(t, k)
			status[k] = hourglass.TimerCancelled
		}
		f.clock.Advance(time.Second)
		for _, k := range []string{keys[2], keys[5], keys[7]} {
			f.fire(t, byKey[k].ID)
			status[k] = hourglass.TimerFired
		}
		sorted := slices.Sorted(maps.Keys(byKey))
		all := f.timers(t, hourglass.TimerFilter{Limit: 100})
		if got := timerKeys(all); !slices.Equal(got, sorted) {
			t.Fatalf("Timers = %v, want by key bytewise %v", got, sorted)
		}
		for _, tm := range all {
			if stored := f.timer(t, tm.Key); !sameNamedTimer(tm, stored) || tm.Status != status[tm.Key] {
				t.Errorf("listed %+v, Timer says %+v, want status %s", tm, stored, status[tm.Key])
			}
		}
		for _, st := range []hourglass.TimerStatus{"", hourglass.TimerScheduled, hourglass.TimerFired, hourglass.TimerCancelled} {
			var want []string
			for _, k := range sorted {
				if st == "" || status[k] == st {
					want = append(want, k)
				}
			}
			if got := timerKeys(f.timers(t, hourglass.TimerFilter{Status: st, Limit: 100})); !slices.Equal(got, want) {
				t.Errorf("status %q: %v, want %v", st, got, want)
			}
			var got []string
			for after, n := "", 0; ; n++ {
				if n > maxPages {
					t.Fatalf("Timers paging does not end: the cursor does not advance")
				}
				page := f.timers(t, hourglass.TimerFilter{Status: st, After: after, Limit: 3})
				if len(page) > 3 {
					t.Fatalf("limit 3 returned %d", len(page))
				}
				got = append(got, timerKeys(page)...)
				if len(page) < 3 {
					break
				}
				after = page[len(page)-1].Key
			}
			if !slices.Equal(got, want) {
				t.Errorf("status %q paged by 3: %v, want %v", st, got, want)
			}
		}
		if got := timerKeys(f.timers(t, hourglass.TimerFilter{After: "a", Limit: 2})); !slices.Equal(got, []string{"a-1", "a.2"}) {
			t.Errorf("after \"a\", limit 2: %v, want [a-1 a.2]", got)
		}
		if got := f.timers(t, hourglass.TimerFilter{After: "b", Limit: 10}); len(got) != 0 {
			t.Errorf("after the last key: %v", timerKeys(got))
		}
	})

	t.Run("FireTimers", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 10)
		a, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Second, Payload: json.RawMessage(`{"p":"a"}`), RequestHash: []byte("h")})
		b, _ := f.arm(t, hourglass.ArmTimerParams{Key: "b", Delay: 2 * time.Second, RequestHash: []byte("h")})
		c, _ := f.arm(t, hourglass.ArmTimerParams{Key: "c", Delay: time.Second, RequestHash: []byte("h")})
		f.cancel(t, "c")
		o := f.create(t, time.Second, item("A", 1))
		if fired := f.fire(t); len(fired) != 0 {
			t.Fatalf("fire of no ids: %+v", fired)
		}
		f.clock.Set(a.FireAt.Add(-time.Millisecond))
		if fired := f.fire(t, a.ID, b.ID); len(fired) != 0 {
			t.Fatalf("fire before any fire_at: %+v; want nothing fired", fired)
		}
		f.clock.Set(a.FireAt.Add(3 * time.Millisecond))
		firedAt := f.clock.Now()
		fired := f.fire(t, a.ID, b.ID, c.ID, o.ID, 424242, hourglass.TimerIDBase+424242)
		if want := (hourglass.FiredTimer{ID: a.ID, Key: "a", FireAt: a.FireAt, FiredAt: firedAt}); len(fired) != 1 || !sameFiredTimer(fired[0], want) {
			t.Fatalf("fire = %+v; want only %+v", fired, want)
		}
		if got := f.order(t, o.ID); got.Status != hourglass.StatePendingPayment {
			t.Fatalf("FireTimers touched order %d: %+v", o.ID, got)
		}
		for range 3 {
			f.clock.Advance(time.Second)
			if again := f.fire(t, a.ID, a.ID); len(again) != 0 {
				t.Fatalf("repeat fire = %+v; want a no-op", again)
			}
		}
		want := a
		want.Status, want.FiredAt, want.UpdatedAt = hourglass.TimerFired, firedAt, firedAt
		if got := f.timer(t, "a"); !sameNamedTimer(got, want) {
			t.Fatalf("fired timer %+v, want %+v", got, want)
		}
		// A duplicate id in one call fires its timer once.
		f.clock.Set(b.FireAt)
		if fired := f.fire(t, b.ID, b.ID); len(fired) != 1 || fired[0].ID != b.ID {
			t.Fatalf("fire of a duplicated id = %+v", fired)
		}
		if got := eventTypes(f.events(t, b.ID)); !slices.Equal(got, []hourglass.EventType{hourglass.EventTimerFired}) {
			t.Fatalf("events of b: %v, want one timer.fired", got)
		}
		// The close of orders does not touch timers either.
		if closed := f.closeOrders(t, a.ID, b.ID, c.ID); len(closed) != 0 {
			t.Fatalf("CloseOrders of timer ids closed %+v", closed)
		}
		if got := f.timer(t, "c"); got.Status != hourglass.TimerCancelled {
			t.Fatalf("c is %s, want cancelled", got.Status)
		}
	})

	t.Run("RearmBeforeTheFireWins", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		a, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Second, RequestHash: []byte("h1")})
		f.clock.Set(a.FireAt)
		// The re-arm commits first: the fire that follows at the old time
		// finds the timer not due and does nothing.
		later, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute, RequestHash: []byte("h2")})
		if fired := f.fire(t, a.ID); len(fired) != 0 {
			t.Fatalf("a fire at the old time after a re-arm fired %+v", fired)
		}
		if got := f.timer(t, "a"); !sameNamedTimer(got, later) {
			t.Fatalf("Timer = %+v, want the re-armed %+v", got, later)
		}
		if evs := f.events(t, a.ID); len(evs) != 0 {
			t.Fatalf("events %v; want none", eventTypes(evs))
		}
		if got := f.timersDue(t, f.clock.Now()); len(got) != 0 {
			t.Fatalf("TimersDue at the old time = %v; want none", got)
		}
		f.clock.Set(later.FireAt)
		if fired := f.fire(t, a.ID); len(fired) != 1 || !fired[0].FireAt.Equal(later.FireAt) {
			t.Fatalf("fire at the new time = %+v", fired)
		}
	})

	t.Run("Events", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: "e", Delay: time.Second, Payload: json.RawMessage(`{"n": 1, "s": "<&>"}`), RequestHash: []byte("h1")})
		f.clock.Advance(1500 * time.Millisecond)
		fired := f.fire(t, tm.ID)
		if len(fired) != 1 {
			t.Fatalf("fire = %+v", fired)
		}
		at := f.timer(t, "e")
		evs := f.events(t, tm.ID)
		if len(evs) != 1 {
			t.Fatalf("events of a fired timer: %v, want one", eventTypes(evs))
		}
		e := evs[0]
		if e.Type != hourglass.EventTimerFired || e.OrderID != tm.ID || !e.CreatedAt.Equal(fired[0].FiredAt) ||
			!strings.HasPrefix(e.ID, "evt_") || len(e.ID) != len("evt_")+26 {
			t.Fatalf("event %+v; want timer.fired of %d at %v with an evt_ id", e, tm.ID, fired[0].FiredAt)
		}
		body := hourglass.MarshalTimerEvent(e.ID, at)
		if body == nil || string(e.Body) != string(body) {
			t.Fatalf("event body\n got %s\nwant %s", e.Body, body)
		}
		// A re-arm changes the timer, not the event.
		f.clock.Advance(time.Second)
		f.arm(t, hourglass.ArmTimerParams{Key: "e", Delay: time.Minute, Payload: json.RawMessage(`{"n":2}`), RequestHash: []byte("h2")})
		if evs := f.events(t, tm.ID); len(evs) != 1 || string(evs[0].Body) != string(body) {
			t.Fatalf("events after a re-arm: %+v; want the one event with its body", evs)
		}
		// Pruned like an order's event once no delivery refers to it.
		if n, err := f.db.PruneEvents(f.ctx, f.clock.Now(), 100); err != nil || n != 1 {
			t.Fatalf("PruneEvents = %d, %v; want the timer's event", n, err)
		}
		if evs := f.events(t, tm.ID); len(evs) != 0 {
			t.Fatalf("events after prune: %v", eventTypes(evs))
		}
	})

	t.Run("Deliveries", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		firedHook := f.webhook(t, "fired", hourglass.EventTimerFired)
		all := f.webhook(t, "all", hourglass.EventTypeAll)
		closedHook := f.webhook(t, "closed", hourglass.EventOrderClosed)
		gone := f.webhook(t, "gone", hourglass.EventTimerFired)
		hooks := map[int64]hourglass.Webhook{firedHook.ID: firedHook, all.ID: all, closedHook.ID: closedHook}
		plain, _ := f.arm(t, hourglass.ArmTimerParams{Key: "plain", Delay: time.Second, Payload: json.RawMessage(`{"x":true}`), RequestHash: []byte("h")})
		direct, _ := f.arm(t, hourglass.ArmTimerParams{Key: "direct", Delay: time.Second, WebhookID: closedHook.ID, RequestHash: []byte("h")})
		orphan, _ := f.arm(t, hourglass.ArmTimerParams{Key: "orphan", Delay: time.Second, WebhookID: gone.ID, RequestHash: []byte("h")})
		if _, err := f.db.DeleteWebhook(f.ctx, gone.ID); err != nil {
			t.Fatal(err)
		}
		ch := f.db.DeliveriesCreated()
		drain(ch)
		f.clock.Advance(time.Second)
		if fired := f.fire(t, plain.ID, direct.ID, orphan.ID); len(fired) != 3 {
			t.Fatalf("fire = %+v, want all three", fired)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("no value on DeliveriesCreated after a fire that created deliveries")
		}
		// The one whose webhook was deleted fired all the same.
		if evs := f.events(t, orphan.ID); len(evs) != 1 {
			t.Fatalf("events of the timer whose webhook was deleted: %v, want one", eventTypes(evs))
		}
		type key struct{ webhook, timer int64 }
		want := []key{{firedHook.ID, plain.ID}, {all.ID, plain.ID}, {closedHook.ID, direct.ID}}
		var got []key
		byKey := map[key]hourglass.PendingDelivery{}
		for _, d := range f.pendingDeliveries(t) {
			k := key{d.WebhookID, d.OrderID}
			got = append(got, k)
			byKey[k] = d
			w := hooks[d.WebhookID]
			evs := f.events(t, d.OrderID)
			if len(evs) != 1 {
				t.Fatalf("delivery %+v of a timer with events %v", d, eventTypes(evs))
			}
			if d.URL != w.URL || d.Secret != w.Secret || d.Attempts != 0 || d.EventType != hourglass.EventTimerFired ||
				d.EventID != evs[0].ID || string(d.Body) != string(evs[0].Body) || !d.NextAttemptAt.Equal(f.clock.Now()) || d.BlockedBy != (hourglass.DeliveryTimer{}) {
				t.Errorf("delivery %+v; want webhook %+v's, of event %+v, due at the fire", d, w, evs[0])
			}
		}
		order := func(a, b key) int {
			if a.timer != b.timer {
				return cmp.Compare(a.timer, b.timer)
			}
			return cmp.Compare(a.webhook, b.webhook)
		}
		slices.SortFunc(got, order)
		slices.SortFunc(want, order)
		if !slices.Equal(got, want) {
			t.Fatalf("deliveries (webhook, timer)\n%v\nwant\n%v", got, want)
		}
		if got := f.deliveryCounts(t); got != [2]int{3, 0} {
			t.Fatalf("DeliveryCounts = %v, want 3 pending", got)
		}
		first := byKey[key{firedHook.ID, plain.ID}]
		if next, ok, err := f.db.NextDelivery(f.ctx, firedHook.ID, plain.ID); err != nil || !ok || next.ID != first.ID {
			t.Fatalf("NextDelivery(%d, timer %d) = %+v, %v, %v; want %d", firedHook.ID, plain.ID, next, ok, err, first.ID)
		}
		// A dead letter of a timer's event.
		dead := byKey[key{closedHook.ID, direct.ID}]
		if rec, err := f.db.RecordAttempt(f.ctx, hourglass.AttemptResult{ID: dead.ID, Error: "HTTP 500"}); !rec.Recorded || err != nil {
			t.Fatalf("record dead: %v, %v", rec.Recorded, err)
		}
		dls, err := f.db.DeadLetters(f.ctx, 0, 10)
		if err != nil || len(dls) != 1 || dls[0].ID != dead.ID || dls[0].OrderID != direct.ID || dls[0].EventType != hourglass.EventTimerFired || dls[0].EventID != dead.EventID {
			t.Fatalf("dead letters %+v, %v; want delivery %d of timer %d's timer.fired", dls, err, dead.ID, direct.ID)
		}
		// Fired again: its webhooks' streams keep the events in order.
		f.arm(t, hourglass.ArmTimerParams{Key: "plain", Delay: time.Second, RequestHash: []byte("h")})
		f.clock.Advance(time.Second)
		f.fire(t, plain.ID)
		var second []hourglass.PendingDelivery
		for _, d := range f.pendingDeliveries(t) {
			if d.OrderID == plain.ID && d.EventID != first.EventID {
				second = append(second, d)
			}
		}
		if len(second) != 2 {
			t.Fatalf("deliveries of the second fire: %+v, want 2", second)
		}
		for _, d := range second {
			earlier := byKey[key{d.WebhookID, plain.ID}]
			if d.BlockedBy.ID != earlier.ID {
				t.Errorf("second fire's delivery %+v blocked by %+v; want the first fire's %d", d, d.BlockedBy, earlier.ID)
			}
		}
	})

	t.Run("TimersDue", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.product(t, "A", "x", 100)
		until := Epoch.Add(4 * time.Second) // excludes the 5 s ones
		var want []hourglass.Timer
		for i := range 30 {
			key := fmt.Sprintf("t%02d", i)
			switch i % 7 {
			case 3:
				f.arm(t, hourglass.ArmTimerParams{Key: key, Delay: time.Second, RequestHash: []byte("h")})
				f.cancel(t, key)
				continue
			case 5:
				tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: key, RequestHash: []byte("h")}) // due now
				if fired := f.fire(t, tm.ID); len(fired) != 1 {
					t.Fatalf("fire %s = %+v", key, fired)
				}
				continue
			}
			// Fire times repeat every 5 timers, so paging must break ties by id.
			tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: key, Delay: time.Duration(1+i%5) * time.Second, RequestHash: []byte("h")})
			if !tm.FireAt.After(until) {
				want = append(want, hourglass.Timer{OrderID: tm.ID, Deadline: tm.FireAt})
			}
		}
		var orders []int64
		for range 3 {
			orders = append(orders, f.create(t, time.Second, item("A", 1)).ID)
		}
		slices.SortFunc(want, func(a, b hourglass.Timer) int {
			if timerBefore(a.Deadline, a.OrderID, b.Deadline, b.OrderID) {
				return -1
			}
			return 1
		})
		for _, limit := range []int{1, 4, 5, 100} {
			var got []hourglass.Timer
			p := hourglass.PendingDueParams{Until: until, Limit: limit}
			for n := 0; ; n++ {
				if n > maxPages {
					t.Fatalf("TimersDue paging does not end: the cursor does not advance")
				}
				page, err := f.ts.TimersDue(f.ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) > limit {
					t.Fatalf("limit %d: a page of %d", limit, len(page))
				}
				got = append(got, page...)
				if len(page) < limit {
					break
				}
				p.After, p.AfterID = page[len(page)-1].Deadline, page[len(page)-1].OrderID
			}
			if !sameTimers(got, want) {
				t.Errorf("limit %d: paged\n%v\nwant\n%v", limit, got, want)
			}
		}
		// A cursor inside a group of equal times continues by id.
		page, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{After: want[2].Deadline, AfterID: want[2].OrderID, Until: until, Limit: 2})
		if err != nil || !sameTimers(page, want[3:5]) {
			t.Fatalf("after %v: %v, %v; want %v", want[2], page, err, want[3:5])
		}
		// Orders and timers stay apart.
		pending, err := f.db.PendingDue(f.ctx, hourglass.PendingDueParams{Until: farFuture, Limit: 1000})
		if err != nil || !slices.Equal(timerIDs(pending), orders) {
			t.Fatalf("PendingDue = %v, %v; want only the orders %v", pending, err, orders)
		}
		// A fired timer is no longer due.
		f.clock.Set(until)
		f.fire(t, want[0].OrderID)
		if page, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{Until: until, Limit: 1}); err != nil || !sameTimers(page, want[1:2]) {
			t.Fatalf("after firing the first: %v, %v; want %v", page, err, want[1])
		}
		if page, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{Until: Epoch, Limit: 10}); err != nil || len(page) != 0 {
			t.Fatalf("until before every fire time: %v, %v", page, err)
		}
	})

	t.Run("TimersDueParts", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		var timers []hourglass.NamedTimer
		for i := range 2*hourglass.Partitions + 3 { // every partition, some twice
			tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: fmt.Sprint("p", i), Delay: time.Second, RequestHash: []byte("h")})
			timers = append(timers, tm)
		}
		f.clock.Advance(time.Minute)
		for _, parts := range []hourglass.Parts{nil, {}, {0}, {hourglass.Partitions - 1}, {1, 5, 63}, {0, 2, 4, 6, 8, 10, 12, 14, 16, 31, 32, 33, 62}} {
			var want []int64
			for _, tm := range timers {
				if parts.Has(tm.ID) {
					want = append(want, tm.ID)
				}
			}
			got, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{Until: f.clock.Now(), Limit: 10000, Parts: parts})
			if err != nil {
				t.Fatalf("TimersDue(parts %v): %v", parts, err)
			}
			if ids := timerIDs(got); !slices.Equal(ids, want) {
				t.Errorf("TimersDue(parts %v) = timers %v, want %v", parts, ids, want)
			}
		}
	})

	t.Run("Outbox", func(t *testing.T) {
		t.Parallel()
		f := withTimers(t, setupStoreWith(t, h, StoreOptions{Outbox: true}))
		f.product(t, "A", "x", 10)
		o := f.create(t, time.Minute, item("A", 1))
		// outbox returns the timers' entries by id, checking that each id
		// has one and that the order's is still there.
		outbox := func(t *testing.T) []hourglass.Timer {
			t.Helper()
			batch, err := f.db.OutboxBatch(f.ctx, 1000, nil)
			if err != nil {
				t.Fatalf("OutboxBatch: %v", err)
			}
			var out []hourglass.Timer
			seen, order := map[int64]bool{}, false
			for _, tm := range batch {
				if seen[tm.OrderID] {
					t.Fatalf("OutboxBatch = %v: id %d twice", batch, tm.OrderID)
				}
				seen[tm.OrderID] = true
				if tm.OrderID == o.ID {
					order = true
				} else {
					out = append(out, tm)
				}
			}
			if !order {
				t.Fatalf("OutboxBatch = %v: the order's entry %d is gone", batch, o.ID)
			}
			slices.SortFunc(out, func(a, b hourglass.Timer) int { return cmp.Compare(a.OrderID, b.OrderID) })
			return out
		}
		done := func(t *testing.T, published ...hourglass.Timer) {
			t.Helper()
			if err := f.db.OutboxDone(f.ctx, published); err != nil {
				t.Fatalf("OutboxDone(%v): %v", published, err)
			}
		}
		a, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute, RequestHash: []byte("h1")})
		b, _ := f.arm(t, hourglass.ArmTimerParams{Key: "b", Delay: time.Hour, RequestHash: []byte("h1")})
		entry := func(tm hourglass.NamedTimer) hourglass.Timer {
			return hourglass.Timer{OrderID: tm.ID, Deadline: tm.FireAt}
		}
		if got, want := outbox(t), []hourglass.Timer{entry(a), entry(b)}; !sameTimers(got, want) {
			t.Fatalf("outbox after arming = %v, want %v", got, want)
		}
		// A re-arm to another time leaves one entry, with the new time.
		f.clock.Advance(time.Second)
		a2, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: 2 * time.Minute, RequestHash: []byte("h2")})
		if got, want := outbox(t), []hourglass.Timer{entry(a2), entry(b)}; !sameTimers(got, want) {
			t.Fatalf("outbox after a re-arm = %v, want %v", got, want)
		}
		// The relay published a's first time before the re-arm: marking
		// that done leaves the new time to be published.
		done(t, entry(a), entry(b))
		if got, want := outbox(t), []hourglass.Timer{entry(a2)}; !sameTimers(got, want) {
			t.Fatalf("outbox after OutboxDone of the old time = %v, want the re-arm's %v", got, want)
		}
		done(t, entry(a2))
		if got := outbox(t); len(got) != 0 {
			t.Fatalf("outbox after OutboxDone = %v", got)
		}
		// A repeat that changes nothing writes nothing; a re-arm writes again.
		f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: 2 * time.Minute, RequestHash: []byte("h2")})
		if got := outbox(t); len(got) != 0 {
			t.Fatalf("outbox after a no-op re-arm = %v, want nothing new", got)
		}
		f.clock.Advance(time.Second)
		a3, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: 3 * time.Minute, RequestHash: []byte("h3")})
		if got, want := outbox(t), []hourglass.Timer{entry(a3)}; !sameTimers(got, want) {
			t.Fatalf("outbox after a re-arm = %v, want %v", got, want)
		}
		done(t, entry(a3))
		// Re-arms of a cancelled or fired timer are written too.
		f.cancel(t, "b")
		f.clock.Set(a3.FireAt)
		f.fire(t, a.ID)
		done(t, entry(a3), entry(b))
		a4, _ := f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute, RequestHash: []byte("h4")})
		b2, _ := f.arm(t, hourglass.ArmTimerParams{Key: "b", Delay: time.Minute, RequestHash: []byte("h1")})
		if got, want := outbox(t), []hourglass.Timer{entry(a4), entry(b2)}; !sameTimers(got, want) {
			t.Fatalf("outbox after re-arming a fired and a cancelled timer = %v, want %v", got, want)
		}
	})

	t.Run("OutboxOffWritesNothing", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Minute, RequestHash: []byte("h1")})
		f.arm(t, hourglass.ArmTimerParams{Key: "a", Delay: time.Hour, RequestHash: []byte("h2")})
		if batch, err := f.db.OutboxBatch(f.ctx, 100, nil); err != nil || len(batch) != 0 {
			t.Fatalf("OutboxBatch without Outbox = %v, %v; want none", batch, err)
		}
	})

	t.Run("Counts", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(0, 0, 0)) {
			t.Fatalf("TimerCounts of an empty database = %v, want every status at 0", got)
		}
		var ids []int64
		for i := range 5 {
			tm, _ := f.arm(t, hourglass.ArmTimerParams{Key: fmt.Sprint("k", i), Delay: time.Second, RequestHash: []byte("h")})
			ids = append(ids, tm.ID)
		}
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(5, 0, 0)) {
			t.Fatalf("TimerCounts after 5 arms = %v", got)
		}
		f.cancel(t, "k0")
		f.clock.Advance(time.Second)
		f.fire(t, ids[1], ids[2], ids[0])
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(2, 2, 1)) {
			t.Fatalf("TimerCounts after a cancel and 2 fires = %v, want 2 scheduled, 2 fired, 1 cancelled", got)
		}
		f.arm(t, hourglass.ArmTimerParams{Key: "k1", Delay: time.Second, RequestHash: []byte("h")})
		f.arm(t, hourglass.ArmTimerParams{Key: "k0", Delay: time.Second, RequestHash: []byte("h")})
		if got := f.timerCounts(t); !maps.Equal(got, timerCountsOf(4, 1, 0)) {
			t.Fatalf("TimerCounts after re-arming a fired and a cancelled timer = %v, want 4 scheduled, 1 fired", got)
		}
	})

	t.Run("Shared", func(t *testing.T) {
		if h.OpenShared == nil {
			t.Skip("store is not shared by several processes (StoreHarness.OpenShared is nil)")
		}
		t.Parallel()
		setup := func(t *testing.T) (a, b timerFixture) {
			t.Helper()
			clock := NewClock(Epoch)
			da, db := h.OpenShared(t, StoreOptions{Clock: clock})
			fa := storeFixture{ctx: context.Background(), db: da, clock: clock}
			return withTimers(t, fa), withTimers(t, fa.on(db))
		}

		t.Run("ConcurrentArmsCreateOne", func(t *testing.T) {
			t.Parallel()
			a, b := setup(t)
			for round, sameHash := range []bool{true, false} {
				key := fmt.Sprint("k-", sameHash)
				const goroutines = 16 // 8 on each store value
				var (
					created atomic.Int64
					mu      sync.Mutex
					got     []hourglass.NamedTimer
					wg      sync.WaitGroup
				)
				for g := range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						f := []timerFixture{a, b}[g%2]
						p := hourglass.ArmTimerParams{Key: key, Delay: time.Minute, Payload: json.RawMessage(`{"g":1}`), RequestHash: []byte("h")}
						if !sameHash {
							p.Payload, p.RequestHash = json.RawMessage(fmt.Sprintf(`{"g":%d}`, g)), []byte(fmt.Sprint("h", g))
						}
						tm, c, err := f.ts.ArmTimer(f.ctx, p)
						if err != nil {
							t.Errorf("ArmTimer: %v", err)
							return
						}
						if c {
							created.Add(1)
						}
						mu.Lock()
						got = append(got, tm)
						mu.Unlock()
					}()
				}
				wg.Wait()
				if created.Load() != 1 {
					t.Fatalf("same hash %v: %d of %d concurrent arms of one key created it, want exactly 1", sameHash, created.Load(), goroutines)
				}
				for _, tm := range got {
					if tm.ID != got[0].ID || tm.Status != hourglass.TimerScheduled || sameHash && !sameNamedTimer(tm, got[0]) {
						t.Fatalf("same hash %v: arms returned %+v and %+v", sameHash, got[0], tm)
					}
				}
				for _, f := range []timerFixture{a, b} {
					all := f.timers(t, hourglass.TimerFilter{Limit: 10})
					if len(all) != round+1 || !slices.Contains(timerKeys(all), key) {
						t.Fatalf("same hash %v: timers %v, want one of key %s", sameHash, timerKeys(all), key)
					}
					if stored := f.timer(t, key); stored.ID != got[0].ID {
						t.Fatalf("same hash %v: Timer(%s) = %+v, arms returned id %d", sameHash, key, stored, got[0].ID)
					}
				}
			}
		})

		t.Run("FireFromTheOther", func(t *testing.T) {
			t.Parallel()
			a, b := setup(t)
			tm, _ := b.arm(t, hourglass.ArmTimerParams{Key: "x", Delay: time.Second, RequestHash: []byte("h")})
			if got := a.timer(t, "x"); !sameNamedTimer(got, tm) {
				t.Fatalf("a reads %+v, b armed %+v", got, tm)
			}
			a.clock.Advance(time.Second)
			if due := a.timersDue(t, a.clock.Now()); len(due) != 1 || due[0].OrderID != tm.ID {
				t.Fatalf("a's TimersDue = %v", due)
			}
			if fired := a.fire(t, tm.ID); len(fired) != 1 {
				t.Fatalf("a fired %+v", fired)
			}
			if got := b.timer(t, "x"); got.Status != hourglass.TimerFired || !got.FiredAt.Equal(a.clock.Now()) {
				t.Fatalf("b reads %+v after a fired it", got)
			}
			if fired := b.fire(t, tm.ID); len(fired) != 0 {
				t.Fatalf("b fired again what a fired: %+v", fired)
			}
			if evs := b.events(t, tm.ID); len(evs) != 1 || evs[0].Type != hourglass.EventTimerFired {
				t.Fatalf("b reads events %v", eventTypes(evs))
			}
			_, err := b.ts.CancelTimer(b.ctx, "x")
			wantCode(t, err, hourglass.CodeTimerFired)
		})
	})

	t.Run("AnnouncedToOtherNodes", func(t *testing.T) {
		if h.OpenShared == nil {
			t.Skip("store is not shared by several processes (StoreHarness.OpenShared is nil)")
		}
		t.Parallel()
		ctx := context.Background()
		da, dbB := h.OpenShared(t, StoreOptions{}) // the database's own clock
		a, ok := da.(hourglass.ClusterStore)
		if !ok {
			t.Skip("store does not implement hourglass.ClusterStore")
		}
		fb := withTimers(t, storeFixture{ctx: ctx, db: dbB})
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		seen := make(chan hourglass.Timer, 1000)
		done := make(chan error, 1)
		go func() {
			done <- a.WatchCreated(wctx, func(ts []hourglass.Timer) {
				for _, t := range ts {
					seen <- t
				}
			})
		}()
		// The watch may take a moment to start; arm until one is seen.
		deadline := time.After(10 * time.Second)
		for i, started := 0, false; !started; i++ {
			fb.arm(t, hourglass.ArmTimerParams{Key: fmt.Sprint("start-", i), Delay: time.Hour, RequestHash: []byte("h")})
			select {
			case <-seen:
				started = true
			case <-time.After(200 * time.Millisecond):
			case <-deadline:
				t.Fatal("WatchCreated reported no timer armed through the other store value within 10s")
			}
		}
		for len(seen) > 0 {
			<-seen
		}
		// wait waits until every timer of want is reported with its fire
		// time; strict fails on another time for one of them.
		wait := func(want map[int64]time.Time, strict bool) {
			t.Helper()
			for len(want) > 0 {
				select {
				case got := <-seen:
					if d, ok := want[got.OrderID]; ok {
						if got.Deadline.Equal(d) {
							delete(want, got.OrderID)
						} else if strict {
							t.Fatalf("timer %d reported with %s, armed to fire at %s", got.OrderID, got.Deadline, d)
						}
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%d timers armed through the other store value not reported within 10s", len(want))
				}
			}
		}
		want := map[int64]time.Time{}
		var keys []string
		for i := range 20 {
			tm, _ := fb.arm(t, hourglass.ArmTimerParams{Key: fmt.Sprint("k", i), Delay: time.Hour, RequestHash: []byte("h1")})
			if !hourglass.IsTimerID(tm.ID) {
				t.Fatalf("armed %+v", tm)
			}
			want[tm.ID] = tm.FireAt
			keys = append(keys, tm.Key)
		}
		wait(want, true)
		// A re-arm to another time is announced with it.
		for _, k := range keys[:5] {
			tm, _ := fb.arm(t, hourglass.ArmTimerParams{Key: k, Delay: 2 * time.Hour, RequestHash: []byte("h2")})
			want[tm.ID] = tm.FireAt
		}
		wait(want, false)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("WatchCreated returned %v after its context ended; want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WatchCreated did not return after its context ended")
		}
	})
}

// timerFixture is a storeFixture with its database's hourglass.TimerStore.
type timerFixture struct {
	storeFixture
	ts hourglass.TimerStore
}

// withTimers returns f with its database's TimerStore; it skips t when the
// store does not implement one.
func withTimers(t *testing.T, f storeFixture) timerFixture {
	t.Helper()
	return timerFixture{storeFixture: f, ts: f.db}
}

// arm arms a timer and returns it and whether it was created.
func (f timerFixture) arm(t *testing.T, p hourglass.ArmTimerParams) (hourglass.NamedTimer, bool) {
	t.Helper()
	tm, created, err := f.ts.ArmTimer(f.ctx, p)
	if err != nil {
		t.Fatalf("ArmTimer(%s): %v", p.Key, err)
	}
	if tm.Key != p.Key || tm.Status != hourglass.TimerScheduled {
		t.Fatalf("ArmTimer(%s) = %+v; want the key, scheduled", p.Key, tm)
	}
	return tm, created
}

func (f timerFixture) timer(t *testing.T, key string) hourglass.NamedTimer {
	t.Helper()
	tm, err := f.ts.Timer(f.ctx, key)
	if err != nil {
		t.Fatalf("Timer(%s): %v", key, err)
	}
	return tm
}

func (f timerFixture) timers(t *testing.T, filter hourglass.TimerFilter) []hourglass.NamedTimer {
	t.Helper()
	ts, err := f.ts.Timers(f.ctx, filter)
	if err != nil {
		t.Fatalf("Timers(%+v): %v", filter, err)
	}
	return ts
}

func (f timerFixture) cancel(t *testing.T, key string) hourglass.NamedTimer {
	t.Helper()
	tm, err := f.ts.CancelTimer(f.ctx, key)
	if err != nil {
		t.Fatalf("CancelTimer(%s): %v", key, err)
	}
	return tm
}

func (f timerFixture) fire(t *testing.T, ids ...int64) []hourglass.FiredTimer {
	t.Helper()
	fired, err := f.ts.FireTimers(f.ctx, ids)
	if err != nil {
		t.Fatalf("FireTimers(%v): %v", ids, err)
	}
	return fired
}

// timersDue returns every timer due at or before until, in one page.
func (f timerFixture) timersDue(t *testing.T, until time.Time) []hourglass.Timer {
	t.Helper()
	ts, err := f.ts.TimersDue(f.ctx, hourglass.PendingDueParams{Until: until, Limit: 10000})
	if err != nil {
		t.Fatalf("TimersDue(until %v): %v", until, err)
	}
	return ts
}

func (f timerFixture) timerCounts(t *testing.T) map[hourglass.TimerStatus]int64 {
	t.Helper()
	got, err := f.ts.TimerCounts(f.ctx)
	if err != nil {
		t.Fatalf("TimerCounts: %v", err)
	}
	return got
}

func timerCountsOf(scheduled, fired, cancelled int64) map[hourglass.TimerStatus]int64 {
	return map[hourglass.TimerStatus]int64{hourglass.TimerScheduled: scheduled, hourglass.TimerFired: fired, hourglass.TimerCancelled: cancelled}
}

// sameNamedTimer reports whether two timers have the same id and fields,
// times to the millisecond and payloads compared as compact JSON (as
// hourglass.MarshalTimer writes them).
func sameNamedTimer(a, b hourglass.NamedTimer) bool {
	ja, jb := hourglass.MarshalTimer(a), hourglass.MarshalTimer(b)
	return a.ID == b.ID && a.Status == b.Status && ja != nil && string(ja) == string(jb)
}

func sameFiredTimer(a, b hourglass.FiredTimer) bool {
	return a.ID == b.ID && a.Key == b.Key && a.FireAt.Equal(b.FireAt) && a.FiredAt.Equal(b.FiredAt)
}

// compactJSON returns raw without insignificant space.
func compactJSON(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("payload %q is not JSON: %v", raw, err)
	}
	return b.String()
}

func timerKeys(ts []hourglass.NamedTimer) []string {
	var out []string
	for _, tm := range ts {
		out = append(out, tm.Key)
	}
	return out
}
