package hourglass

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestEventForEveryState(t *testing.T) {
	t.Parallel()
	seen := map[EventType]bool{}
	for _, s := range States() {
		e := EventFor(s)
		if !e.Valid() || seen[e] {
			t.Errorf("EventFor(%s) = %q: not a known type or not unique", s, e)
		}
		seen[e] = true
	}
	// Every event type is an order's transition but the timer's, the
	// source row's two, order.extended and order.expiring (a pending order
	// stays pending).
	if len(seen) != len(EventTypes())-5 || seen[EventTimerFired] || seen[EventSourceClosed] || seen[EventSourceExpiring] || seen[EventOrderExtended] || seen[EventOrderExpiring] {
		t.Errorf("%d states map to %d of %d event types", len(States()), len(seen), len(EventTypes()))
	}
	if EventTypeAll.Valid() || EventFor("nope") != "" {
		t.Error("\"*\" is valid or an unknown state has an event")
	}
}

func TestMarshalEvent(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 21, 10, 0, 0, 123e6, time.UTC)
	o := Order{ID: 7, UserID: "u", Status: StateClosed, Items: []Item{{SKU: "A", Quantity: 2}},
		CreatedAt: created, Deadline: created.Add(time.Minute), ClosedAt: created.Add(time.Minute + time.Millisecond), CloseReason: CloseReasonTimeout}
	got := string(MarshalEvent(Event{ID: "evt_1", Type: EventOrderClosed, CreatedAt: o.ClosedAt, Order: o}))
	want := `{"id":"evt_1","type":"order.closed","created_at":"2026-11-21T10:01:00.124Z","order":{"id":7,"user_id":"u","status":"closed",` +
		`"items":[{"sku":"A","quantity":2}],"created_at":"2026-11-21T10:00:00.123Z","deadline":"2026-11-21T10:01:00.123Z",` +
		`"paid_at":null,"closed_at":"2026-11-21T10:01:00.124Z","close_reason":"timeout","payment_id":null}}`
	if got != want {
		t.Errorf("MarshalEvent\n got %s\nwant %s", got, want)
	}
	if !json.Valid([]byte(got)) {
		t.Error("not JSON")
	}
	if a, b := NewEventID(), NewEventID(); a == b || !strings.HasPrefix(a, "evt_") || len(a) != 30 {
		t.Errorf("event ids %q, %q", a, b)
	}
}

func TestWebhookParamsValidate(t *testing.T) {
	t.Parallel()
	ok := WebhookParams{URL: "https://hooks.example.com/hourglass?x=1", Events: []EventType{EventOrderPaid}, Secret: strings.Repeat("s", 16)}
	tests := []struct {
		name   string
		change func(p *WebhookParams)
		want   string // in the message; "" for valid
	}{
		{"valid", func(*WebhookParams) {}, ""},
		{"all events", func(p *WebhookParams) { p.Events = []EventType{EventTypeAll} }, ""},
		{"http", func(p *WebhookParams) { p.URL = "http://h:8080/x" }, ""},
		{"longest secret", func(p *WebhookParams) { p.Secret = strings.Repeat("s", 256) }, ""},
		{"no url", func(p *WebhookParams) { p.URL = "" }, "url: required"},
		{"relative url", func(p *WebhookParams) { p.URL = "/hook" }, "scheme must be http or https"},
		{"ftp", func(p *WebhookParams) { p.URL = "ftp://h/x" }, "scheme must be http or https"},
		{"no host", func(p *WebhookParams) { p.URL = "https:///x" }, "has no host"},
		{"credentials", func(p *WebhookParams) { p.URL = "https://u:p@h/x" }, "credentials"},
		{"fragment", func(p *WebhookParams) { p.URL = "https://h/x#f" }, "fragment"},
		{"bad url", func(p *WebhookParams) { p.URL = "https://h:x:y/%zz" }, "not a valid URL"},
		{"long url", func(p *WebhookParams) { p.URL = "https://h/" + strings.Repeat("a", 2048) }, "at most 2048 bytes"},
		{"no events", func(p *WebhookParams) { p.Events = nil }, "at least one event type"},
		{"unknown event", func(p *WebhookParams) { p.Events = []EventType{"order.lost"} }, `unknown event type "order.lost"`},
		{"duplicate event", func(p *WebhookParams) { p.Events = []EventType{EventOrderPaid, EventOrderPaid} }, "more than once"},
		{"all and more", func(p *WebhookParams) { p.Events = []EventType{EventTypeAll, EventOrderPaid} }, "list it alone"},
		{"short secret", func(p *WebhookParams) { p.Secret = "short" }, "secret: must be 16 to 256 bytes, got 5"},
		{"long secret", func(p *WebhookParams) { p.Secret = strings.Repeat("s", 257) }, "got 257"},
	}
	for _, tt := range tests {
		p := ok
		tt.change(&p)
		err := p.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (ErrorCode(err) != CodeInvalidArgument || !strings.Contains(ErrorMessage(err), tt.want)):
			t.Errorf("%s: got %v, want invalid_argument with %q", tt.name, err, tt.want)
		}
	}
}
