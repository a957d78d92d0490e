package hourglass

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestArmTimerParamsValidate(t *testing.T) {
	t.Parallel()
	ok := ArmTimerParams{Key: "coupon:42.a_b-C", Delay: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid params refused: %v", err)
	}
	for name, tc := range map[string]struct {
		p    ArmTimerParams
		want string
	}{
		"empty key":       {ArmTimerParams{}, "key"},
		"long key":        {ArmTimerParams{Key: strings.Repeat("k", MaxTimerKey+1)}, "key"},
		"bad character":   {ArmTimerParams{Key: "a/b"}, "key"},
		"space":           {ArmTimerParams{Key: "a b"}, "key"},
		"negative delay":  {ArmTimerParams{Key: "k", Delay: -time.Millisecond}, "delay_ms"},
		"delay too long":  {ArmTimerParams{Key: "k", Delay: MaxTimerDelay + time.Millisecond}, "delay_ms"},
		"payload array":   {ArmTimerParams{Key: "k", Payload: json.RawMessage(`[1]`)}, "payload"},
		"payload null":    {ArmTimerParams{Key: "k", Payload: json.RawMessage(`null`)}, "payload"},
		"payload broken":  {ArmTimerParams{Key: "k", Payload: json.RawMessage(`{"a":`)}, "payload"},
		"payload too big": {ArmTimerParams{Key: "k", Payload: json.RawMessage(`{"a":"` + strings.Repeat("x", MaxTimerPayload) + `"}`)}, "payload"},
		"webhook":         {ArmTimerParams{Key: "k", WebhookID: -1}, "webhook_id"},
		"payload utf-8":   {ArmTimerParams{Key: "k", Payload: json.RawMessage("{\"a\":\"\xff\"}")}, "payload"},
		// The API's strict rules hold for every caller (issue 37: a shop's
		// timer_requests row armed these).
		"payload NUL":       {ArmTimerParams{Key: "k", Payload: json.RawMessage(`{"a":"\u0000"}`)}, "payload"},
		"payload raw NUL":   {ArmTimerParams{Key: "k", Payload: json.RawMessage("{\"a\":\"\x00\"}")}, "payload"},
		"payload surrogate": {ArmTimerParams{Key: "k", Payload: json.RawMessage(`{"a":"\ud800"}`)}, "payload"},
		"payload key twice": {ArmTimerParams{Key: "k", Payload: json.RawMessage(`{"a":1,"b":{"c":1,"c":2}}`)}, "payload"},
		"payload -0":        {ArmTimerParams{Key: "k", Payload: json.RawMessage(`{"a":-0}`)}, "payload"},
		"payload trailing":  {ArmTimerParams{Key: "k", Payload: json.RawMessage(`{"a":1} {}`)}, "payload"},
		"payload deep":      {ArmTimerParams{Key: "k", Payload: json.RawMessage(strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65))}, "payload"},
	} {
		err := tc.p.Validate()
		if ErrorCode(err) != CodeInvalidArgument || !strings.HasPrefix(ErrorMessage(err), tc.want+":") && !strings.HasPrefix(ErrorMessage(err), tc.want+".") {
			t.Errorf("%s: got %v, want invalid_argument naming %s", name, err, tc.want)
		}
	}
	if !IsTimerID(TimerIDBase) || IsTimerID(TimerIDBase-1) {
		t.Error("IsTimerID misplaces the boundary")
	}
}

func TestMarshalTimerEvent(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 10, 0, 0, 5e6, time.UTC)
	tm := Timer{ID: TimerIDBase, Key: "coupon:1", Status: TimerFired, FireAt: at, FiredAt: at.Add(2 * time.Millisecond),
		Payload: json.RawMessage(`{"coupon": "X1"}`), CreatedAt: at.Add(-time.Minute), UpdatedAt: at.Add(2 * time.Millisecond)}
	got := string(MarshalTimerEvent("evt_1", tm))
	want := `{"id":"evt_1","type":"timer.fired","created_at":"2026-11-24T10:00:00.007Z","timer":{"key":"coupon:1","status":"fired",` +
		`"fire_at":"2026-11-24T10:00:00.005Z","fired_at":"2026-11-24T10:00:00.007Z","payload":{"coupon":"X1"},"webhook_id":null,` +
		`"created_at":"2026-11-24T09:59:00.005Z","updated_at":"2026-11-24T10:00:00.007Z"}}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	tm.Payload, tm.WebhookID, tm.FiredAt, tm.Status = nil, 7, time.Time{}, TimerScheduled
	if got := string(MarshalTimer(tm)); !strings.Contains(got, `"payload":null,"webhook_id":7`) || !strings.Contains(got, `"fired_at":null`) {
		t.Fatalf("unset fields: %s", got)
	}
}

// TestMarshalTimerKeepsPayloadCharacters: <, > and & in a payload are not
// rewritten as \u003c and so on.
func TestMarshalTimerKeepsPayloadCharacters(t *testing.T) {
	t.Parallel()
	tm := Timer{Key: "k", Status: TimerScheduled, Payload: json.RawMessage(`{"html":"<b>a & b</b>"}`)}
	if got := string(MarshalTimer(tm)); !strings.Contains(got, `"payload":{"html":"<b>a & b</b>"}`) {
		t.Fatalf("payload rewritten: %s", got)
	}
	if got := MarshalTimerEvent("evt_1", tm); !json.Valid(got) || !strings.Contains(string(got), `<b>a & b</b>`) {
		t.Fatalf("event body: %s", got)
	}
}
