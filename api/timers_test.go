package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// timerFields are the fields of a timer's JSON, all always present.
var timerFields = []string{"key", "status", "fire_at", "fired_at", "payload", "webhook_id", "created_at", "updated_at"}

// checkTimerJSON checks the raw JSON of a timer — exactly the documented
// fields, times in the API format, fired_at null unless fired, payload null
// or an object, webhook_id null or a positive id — and returns it decoded,
// with its raw fields.
func checkTimerJSON(t *testing.T, raw []byte) (api.TimerJSON, map[string]json.RawMessage) {
	t.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatalf("timer JSON %s: %v", raw, err)
	}
	if keys := slices.Sorted(func(yield func(string) bool) {
		for k := range fields {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(keys, slices.Sorted(slices.Values(timerFields))) {
		t.Errorf("timer JSON %s has fields %v, want %v", raw, keys, slices.Sorted(slices.Values(timerFields)))
	}
	var tm api.TimerJSON
	if err := json.Unmarshal(raw, &tm); err != nil {
		t.Fatalf("timer JSON %s: %v", raw, err)
	}
	for name, v := range map[string]string{"fire_at": tm.FireAt, "created_at": tm.CreatedAt, "updated_at": tm.UpdatedAt} {
		if !apiTime.MatchString(v) {
			t.Errorf("timer JSON %s = %q, want a time like 2006-01-02T15:04:05.000Z", name, v)
		}
	}
	if fired := tm.Status == "fired"; fired != (tm.FiredAt != nil) {
		t.Errorf("timer JSON status %q with fired_at %s", tm.Status, fields["fired_at"])
	} else if fired && !apiTime.MatchString(*tm.FiredAt) {
		t.Errorf("timer JSON fired_at = %q, want a time like 2006-01-02T15:04:05.000Z", *tm.FiredAt)
	}
	if !slices.Contains([]string{"scheduled", "fired", "cancelled"}, tm.Status) {
		t.Errorf("timer JSON status = %q", tm.Status)
	}
	if p := fields["payload"]; string(p) != "null" && (len(p) == 0 || p[0] != '{') {
		t.Errorf("timer JSON payload = %s, want null or an object", p)
	}
	if tm.WebhookID != nil && *tm.WebhookID < 1 {
		t.Errorf("timer JSON webhook_id = %d, want null or a webhook's id", *tm.WebhookID)
	}
	if tm.Key == "" || apiTimeOf(t, tm.UpdatedAt).Before(apiTimeOf(t, tm.CreatedAt)) {
		t.Errorf("timer JSON %s: empty key or updated_at before created_at", raw)
	}
	return tm, fields
}

// keyPath returns key escaped for a path; the dot segments "." and ".."
// percent-encoded, as a URL would lose them.
func keyPath(key string) string {
	if key == "." || key == ".." {
		return strings.ReplaceAll(key, ".", "%2E")
	}
	return url.PathEscape(key)
}

// putTimer sends PUT /v1/timers/{key} with a raw body and returns the status
// and raw answer; key is put in the path as given (escape it yourself).
func (s *testServer) putTimer(t *testing.T, key, body string) (int, []byte) {
	t.Helper()
	status, _, raw := s.call(t, http.MethodPut, "/v1/timers/"+key, nil, []byte(body))
	return status, raw
}

// armTimer arms key with a raw body, checks the status and returns the timer.
func (s *testServer) armTimer(t *testing.T, key, body string, wantStatus int) api.TimerJSON {
	t.Helper()
	status, raw := s.putTimer(t, keyPath(key), body)
	if status != wantStatus {
		t.Fatalf("PUT timer %s %s: status %d, want %d; body %s", key, body, status, wantStatus, raw)
	}
	tm, _ := checkTimerJSON(t, raw)
	if tm.Key != key || tm.Status != "scheduled" {
		t.Fatalf("PUT timer %s: got %s, want key %s scheduled", key, raw, key)
	}
	return tm
}

// timer returns GET /v1/timers/{key}, which must answer 200.
func (s *testServer) timer(t *testing.T, key string) api.TimerJSON {
	t.Helper()
	status, _, raw := s.call(t, http.MethodGet, "/v1/timers/"+keyPath(key), nil, nil)
	if status != http.StatusOK {
		t.Fatalf("GET timer %s: status %d, body %s", key, status, raw)
	}
	tm, _ := checkTimerJSON(t, raw)
	return tm
}

// cancelTimer sends DELETE /v1/timers/{key}, which must answer 200 with the
// timer cancelled.
func (s *testServer) cancelTimer(t *testing.T, key string) api.TimerJSON {
	t.Helper()
	status, _, raw := s.call(t, http.MethodDelete, "/v1/timers/"+keyPath(key), nil, nil)
	if status != http.StatusOK {
		t.Fatalf("DELETE timer %s: status %d, body %s", key, status, raw)
	}
	tm, _ := checkTimerJSON(t, raw)
	if tm.Status != "cancelled" {
		t.Fatalf("DELETE timer %s: status %q, want cancelled", key, tm.Status)
	}
	return tm
}

// waitFired polls GET until key is fired and returns it.
func (s *testServer) waitFired(t *testing.T, key string) api.TimerJSON {
	t.Helper()
	var tm api.TimerJSON
	testenv.Eventually(t, 10*time.Second, "timer "+key+" fired", func() bool {
		tm = s.timer(t, key)
		return tm.Status == "fired"
	})
	return tm
}

// nextMilli waits until the clock has passed the millisecond of ts (an API
// time), so a write after it cannot have the same updated_at by chance.
func nextMilli(t *testing.T, ts string) {
	t.Helper()
	after := apiTimeOf(t, ts).Add(time.Millisecond)
	testenv.Eventually(t, time.Second, "clock past "+ts, func() bool { return time.Now().After(after) })
}

// compact returns the compact form of a JSON text.
func compact(t *testing.T, s string) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(s)); err != nil {
		t.Fatalf("compact %s: %v", s, err)
	}
	return b.String()
}

// TestTimerAPI walks a timer through every answer of /v1/timers/{key}: 201
// on create, 200 on GET, the same request again (200, nothing changed), a
// different one (200, re-armed), DELETE (200 cancelled, twice), re-arm after
// cancel, fire, DELETE of a fired timer (409 timer_fired), re-arm after fire
// with the same body, and 404s for unknown keys.
func TestTimerAPI(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{WebhookAllow: "127.0.0.1"})

	// The payload comes back as given: key order, nesting and non-ASCII
	// text kept (insignificant whitespace aside).
	payload := `{"z": 1, "a": {"y": [1, "two", null, true], "b": "caf\u00e9 ☕"}, "n": -1.5e3}`
	body := `{"delay_ms": 60000, "payload": ` + payload + `}`
	before := time.Now()
	status, raw := s.putTimer(t, "order:42.reminder_1-A", body)
	if status != http.StatusCreated {
		t.Fatalf("PUT new timer: status %d, body %s", status, raw)
	}
	created, fields := checkTimerJSON(t, raw)
	if created.Key != "order:42.reminder_1-A" || created.Status != "scheduled" || created.FiredAt != nil || created.WebhookID != nil {
		t.Errorf("created timer = %s", raw)
	}
	if got, want := string(fields["payload"]), compact(t, payload); got != want {
		t.Errorf("payload = %s, want %s", got, want)
	}
	if string(fields["fired_at"]) != "null" || string(fields["webhook_id"]) != "null" {
		t.Errorf("created timer: fired_at %s, webhook_id %s, want null", fields["fired_at"], fields["webhook_id"])
	}
	createdAt := apiTimeOf(t, created.CreatedAt)
	if d := apiTimeOf(t, created.FireAt).Sub(createdAt); d != time.Minute {
		t.Errorf("fire_at - created_at = %v, want 1m", d)
	}
	if created.UpdatedAt != created.CreatedAt || createdAt.Before(before.Add(-time.Millisecond)) || createdAt.After(time.Now()) {
		t.Errorf("created_at %s, updated_at %s: want equal and within the request", created.CreatedAt, created.UpdatedAt)
	}
	if got := s.timer(t, created.Key); !reflect.DeepEqual(got, created) {
		t.Errorf("GET = %+v, want %+v", got, created)
	}

	// The same request again while scheduled changes nothing.
	nextMilli(t, created.UpdatedAt)
	if got := s.armTimer(t, created.Key, body, http.StatusOK); !reflect.DeepEqual(got, created) {
		t.Errorf("the same PUT again = %+v, want it unchanged %+v", got, created)
	}
	// Whitespace outside the payload is not part of the request's meaning.
	if got := s.armTimer(t, created.Key, " {\n\"payload\":"+payload+",\"delay_ms\":60000}\n", http.StatusOK); !reflect.DeepEqual(got, created) {
		t.Errorf("the same PUT, fields reordered = %+v, want it unchanged %+v", got, created)
	}

	// A different request re-arms it.
	rearmed := s.armTimer(t, created.Key, `{"delay_ms":120000}`, http.StatusOK)
	if rearmed.CreatedAt != created.CreatedAt || rearmed.UpdatedAt == created.UpdatedAt || rearmed.Payload != nil && string(rearmed.Payload) != "null" {
		t.Errorf("re-armed with another body = %+v (created %+v): want the same created_at, a new updated_at, payload null", rearmed, created)
	}
	if d := apiTimeOf(t, rearmed.FireAt).Sub(apiTimeOf(t, rearmed.UpdatedAt)); d != 2*time.Minute {
		t.Errorf("re-armed fire_at - updated_at = %v, want 2m", d)
	}

	// An explicit fire_at in another zone comes back in UTC, to the ms,
	// rounded up (never before the time asked for). The day is half a year
	// ahead: fire_at may be at most one year ahead.
	day := time.Now().UTC().AddDate(0, 6, 0).Format("2006-01-02")
	for _, tt := range []struct{ in, want string }{
		{"2099-01-02T03:04:05.678+02:00", "2099-01-02T01:04:05.678Z"},
		{"2099-01-02T03:04:05.678000001+02:00", "2099-01-02T01:04:05.679Z"},
		{"2099-01-02T01:04:05Z", "2099-01-02T01:04:05.000Z"},
		{"2099-01-02T03:04:05.678912+02:00", "2099-01-02T01:04:05.679Z"},
	} {
		tt.in, tt.want = strings.Replace(tt.in, "2099-01-02", day, 1), strings.Replace(tt.want, "2099-01-02", day, 1)
		got := s.armTimer(t, created.Key, `{"fire_at":"`+tt.in+`"}`, http.StatusOK)
		if got.FireAt != tt.want {
			t.Errorf("fire_at %s came back as %s, want %s", tt.in, got.FireAt, tt.want)
		}
	}
	at := s.timer(t, created.Key)

	// DELETE cancels; again it answers the cancelled timer unchanged.
	nextMilli(t, at.UpdatedAt)
	cancelled := s.cancelTimer(t, created.Key)
	if cancelled.UpdatedAt == at.UpdatedAt || cancelled.FireAt != at.FireAt || cancelled.FiredAt != nil {
		t.Errorf("cancelled = %+v (was %+v)", cancelled, at)
	}
	nextMilli(t, cancelled.UpdatedAt)
	if again := s.cancelTimer(t, created.Key); !reflect.DeepEqual(again, cancelled) {
		t.Errorf("second DELETE = %+v, want %+v", again, cancelled)
	}
	if got := s.timer(t, created.Key); !reflect.DeepEqual(got, cancelled) {
		t.Errorf("GET cancelled = %+v, want %+v", got, cancelled)
	}
	// Re-arming a cancelled timer with the body it was armed with is a
	// re-arm, not a repeat.
	if got := s.armTimer(t, created.Key, `{"fire_at":"`+day+`T03:04:05.678912+02:00"}`, http.StatusOK); got.FireAt != at.FireAt || got.UpdatedAt == cancelled.UpdatedAt {
		t.Errorf("re-arm after cancel = %+v", got)
	}

	// A fire_at in the past means now; the timer fires.
	before = time.Now()
	past := s.armTimer(t, "fires-now", `{"fire_at":"2001-02-03T04:05:06Z","payload":{"k":"v"}}`, http.StatusCreated)
	if fireAt := apiTimeOf(t, past.FireAt); fireAt.Before(before.Add(-time.Millisecond)) || fireAt.After(time.Now()) {
		t.Errorf("fire_at %s for a time in the past, want the request's now", past.FireAt)
	}
	fired := s.waitFired(t, "fires-now")
	if apiTimeOf(t, *fired.FiredAt).Before(apiTimeOf(t, fired.FireAt)) || fired.FireAt != past.FireAt || string(fired.Payload) != `{"k":"v"}` {
		t.Errorf("fired = %+v (armed %+v)", fired, past)
	}
	status, _, raw = s.call(t, http.MethodDelete, "/v1/timers/fires-now", nil, nil)
	checkError(t, "DELETE a fired timer", status, raw, http.StatusConflict, "timer_fired")
	if got := s.timer(t, "fires-now"); !reflect.DeepEqual(got, fired) {
		t.Errorf("refused DELETE changed the timer: %+v, was %+v", got, fired)
	}
	// The same body re-arms a fired timer: scheduled again, fired_at null.
	again := s.armTimer(t, "fires-now", `{"fire_at":"2001-02-03T04:05:06Z","payload":{"k":"v"}}`, http.StatusOK)
	if again.FiredAt != nil || again.CreatedAt != past.CreatedAt || !apiTimeOf(t, again.FireAt).After(apiTimeOf(t, fired.FireAt).Add(-time.Millisecond)) {
		t.Errorf("re-armed after fire = %+v", again)
	}
	s.waitFired(t, "fires-now")
	// However far in the past, even before the epoch.
	for i, past := range []string{"1970-01-01T00:00:00Z", "1969-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z", "0000-01-01T00:30:00+01:00"} {
		key := fmt.Sprint("long-ago-", i)
		before := time.Now()
		tm := s.armTimer(t, key, `{"fire_at":"`+past+`"}`, http.StatusCreated)
		if fireAt := apiTimeOf(t, tm.FireAt); fireAt.Before(before.Add(-time.Millisecond)) || fireAt.After(time.Now()) {
			t.Errorf("fire_at %s came back as %s, want the request's now", past, tm.FireAt)
		}
		s.waitFired(t, key)
	}

	// delay_ms 0 and the largest delay are accepted; so is a 200-character key.
	s.armTimer(t, "zero", `{"delay_ms":0}`, http.StatusCreated)
	longest := s.armTimer(t, "longest", `{"delay_ms":31536000000}`, http.StatusCreated)
	if d := apiTimeOf(t, longest.FireAt).Sub(apiTimeOf(t, longest.CreatedAt)); d != 365*24*time.Hour {
		t.Errorf("delay_ms 31536000000: fire_at - created_at = %v", d)
	}
	s.armTimer(t, strings.Repeat("k", 200), `{"delay_ms":1000,"payload":null}`, http.StatusCreated)
	s.armTimer(t, "empty-payload", `{"delay_ms":1000,"payload":{}}`, http.StatusCreated)
	if got := s.timer(t, "empty-payload"); string(got.Payload) != "{}" {
		t.Errorf("payload {} came back as %s", got.Payload)
	}
	// A payload of exactly 64 KiB is accepted.
	big := `{"p":"` + strings.Repeat("x", 64<<10-8) + `"}`
	s.armTimer(t, "big", `{"delay_ms":60000,"payload":`+big+`}`, http.StatusCreated)
	if got := s.timer(t, "big"); string(got.Payload) != big {
		t.Errorf("64 KiB payload came back with %d bytes", len(got.Payload))
	}

	// webhook_id names the webhook the timer goes to (one subscribed to
	// timer.fired: TestTimerWebhookMustSubscribe).
	w := s.createWebhook(t, "http://127.0.0.1:9/hook", "timer.fired")
	status, raw = s.putTimer(t, "hooked", fmt.Sprintf(`{"delay_ms":60000,"webhook_id":%d}`, w.ID))
	if status != http.StatusCreated {
		t.Fatalf("PUT with webhook_id: %d %s", status, raw)
	}
	if hooked, fields := checkTimerJSON(t, raw); hooked.WebhookID == nil || *hooked.WebhookID != w.ID || string(fields["webhook_id"]) != fmt.Sprint(w.ID) {
		t.Errorf("webhook_id = %s, want %d", fields["webhook_id"], w.ID)
	}

	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		status, _, raw := s.call(t, method, "/v1/timers/no-such-timer", nil, nil)
		checkError(t, method+" an unknown timer", status, raw, http.StatusNotFound, "not_found")
	}
}

// TestTimerMethodNotAllowed: a method a timer route does not have is a JSON
// 405 naming the methods it has.
func TestTimerMethodNotAllowed(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	for _, tt := range []struct{ method, path, allow string }{
		{http.MethodPost, "/v1/timers/x", "PUT, GET, DELETE"},
		{http.MethodPatch, "/v1/timers/x", "PUT, GET, DELETE"},
		{http.MethodPost, "/v1/timers", "GET"},
		{http.MethodDelete, "/v1/timers", "GET"},
		{http.MethodPut, "/v1/timers", "GET"},
	} {
		status, header, raw := s.call(t, tt.method, tt.path, nil, nil)
		checkError(t, tt.method+" "+tt.path, status, raw, http.StatusMethodNotAllowed, "method_not_allowed")
		if got := header.Get("Allow"); !sameMethods(got, tt.allow) {
			t.Errorf("%s %s: Allow %q, want %q", tt.method, tt.path, got, tt.allow)
		}
	}
}

// sameMethods compares two "A, B" lists as sets.
func sameMethods(a, b string) bool {
	return slices.Equal(slices.Sorted(slices.Values(strings.Split(a, ", "))), slices.Sorted(slices.Values(strings.Split(b, ", "))))
}

// TestTimerValidation: every kind of bad input is a 400 invalid_argument
// whose message names what was wrong, and creates nothing.
func TestTimerValidation(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{WebhookAllow: "127.0.0.1"})
	w := s.createWebhook(t, "http://127.0.0.1:9/hook", "timer.fired")
	s.armTimer(t, "existing", `{"delay_ms":60000}`, http.StatusCreated)
	existing := s.timer(t, "existing")

	key201 := strings.Repeat("k", 201)
	tooBig := `{"p":"` + strings.Repeat("x", 64<<10-7) + `"}` // 64 KiB + 1
	tests := []struct {
		name, method, path, body string
		// want is a part of the message that names the problem.
		want string
	}{
		{"neither fire_at nor delay_ms", "PUT", "/v1/timers/k", `{}`, "fire_at, delay_ms"},
		{"neither, payload only", "PUT", "/v1/timers/k", `{"payload":{"a":1}}`, "fire_at, delay_ms"},
		{"both fire_at and delay_ms", "PUT", "/v1/timers/k", `{"fire_at":"2030-01-01T00:00:00Z","delay_ms":1}`, "fire_at, delay_ms"},
		{"fire_at not a time", "PUT", "/v1/timers/k", `{"fire_at":"tomorrow"}`, "fire_at"},
		{"fire_at without zone", "PUT", "/v1/timers/k", `{"fire_at":"2030-01-01T00:00:00"}`, "fire_at"},
		{"fire_at date only", "PUT", "/v1/timers/k", `{"fire_at":"2030-01-01"}`, "fire_at"},
		{"fire_at empty", "PUT", "/v1/timers/k", `{"fire_at":""}`, "fire_at"},
		{"fire_at a number", "PUT", "/v1/timers/k", `{"fire_at":1893456000000}`, "fire_at"},
		{"fire_at null", "PUT", "/v1/timers/k", `{"fire_at":null}`, "fire_at"},
		{"fire_at bad offset", "PUT", "/v1/timers/k", `{"fire_at":"2030-01-01T00:00:00+25:00"}`, "fire_at"},
		{"fire_at after year 9999 in UTC", "PUT", "/v1/timers/k", `{"fire_at":"9999-12-31T23:00:00-02:00"}`, "fire_at"},
		{"fire_at five-digit year", "PUT", "/v1/timers/k", `{"fire_at":"10000-01-01T00:00:00Z"}`, "fire_at"},
		{"fire_at leap second", "PUT", "/v1/timers/k", `{"fire_at":"2030-06-30T23:59:60Z"}`, "fire_at"},
		{"delay_ms negative", "PUT", "/v1/timers/k", `{"delay_ms":-1}`, "delay_ms"},
		{"delay_ms negative zero", "PUT", "/v1/timers/k", `{"delay_ms":-0}`, "delay_ms"},
		{"delay_ms over a year", "PUT", "/v1/timers/k", `{"delay_ms":31536000001}`, "delay_ms"},
		{"delay_ms beyond int64", "PUT", "/v1/timers/k", `{"delay_ms":99999999999999999999}`, "delay_ms"},
		{"delay_ms fractional", "PUT", "/v1/timers/k", `{"delay_ms":1.5}`, "delay_ms"},
		{"delay_ms a string", "PUT", "/v1/timers/k", `{"delay_ms":"100"}`, "delay_ms"},
		{"payload an array", "PUT", "/v1/timers/k", `{"delay_ms":1,"payload":[1]}`, "payload"},
		{"payload a string", "PUT", "/v1/timers/k", `{"delay_ms":1,"payload":"x"}`, "payload"},
		{"payload a number", "PUT", "/v1/timers/k", `{"delay_ms":1,"payload":1}`, "payload"},
		{"payload true", "PUT", "/v1/timers/k", `{"delay_ms":1,"payload":true}`, "payload"},
		{"payload over 64 KiB", "PUT", "/v1/timers/k", `{"delay_ms":1,"payload":` + tooBig + `}`, "payload"},
		{"payload invalid UTF-8", "PUT", "/v1/timers/k", "{\"delay_ms\":1,\"payload\":{\"a\":\"\xff\xfe\"}}", "payload"},
		{"payload key invalid UTF-8", "PUT", "/v1/timers/k", "{\"delay_ms\":1,\"payload\":{\"\xc3\":1}}", "payload"},
		{"payload duplicate key", "PUT", "/v1/timers/k", `{"delay_ms":1,"payload":{"a":1,"a":2}}`, "payload.a"},
		{"payload nested duplicate key", "PUT", "/v1/timers/k", `{"delay_ms":1,"payload":{"a":{"b":1,"b":1}}}`, "payload.a.b"},
		{"payload duplicate escaped key", "PUT", "/v1/timers/k", `{"delay_ms":1,"payload":{"a":1,"\u0061":2}}`, "payload.a"},
		{"duplicate delay_ms", "PUT", "/v1/timers/k", `{"delay_ms":1,"delay_ms":2}`, "delay_ms"},
		{"unknown field", "PUT", "/v1/timers/k", `{"delay_ms":1,"fireAt":"2030-01-01T00:00:00Z"}`, "fireAt"},
		{"field in the wrong case", "PUT", "/v1/timers/k", `{"Delay_ms":1}`, "Delay_ms"},
		{"webhook_id 0", "PUT", "/v1/timers/k", `{"delay_ms":1,"webhook_id":0}`, "webhook_id"},
		{"webhook_id negative", "PUT", "/v1/timers/k", `{"delay_ms":1,"webhook_id":-3}`, "webhook_id"},
		{"webhook_id unknown", "PUT", "/v1/timers/k", fmt.Sprintf(`{"delay_ms":1,"webhook_id":%d}`, w.ID+1000), "webhook_id"},
		{"webhook_id a string", "PUT", "/v1/timers/k", fmt.Sprintf(`{"delay_ms":1,"webhook_id":"%d"}`, w.ID), "webhook_id"},
		{"webhook_id fractional", "PUT", "/v1/timers/k", `{"delay_ms":1,"webhook_id":1.5}`, "webhook_id"},
		{"empty body", "PUT", "/v1/timers/k", ``, "body"},
		{"body an array", "PUT", "/v1/timers/k", `[{"delay_ms":1}]`, "object"},
		{"body null", "PUT", "/v1/timers/k", `null`, "object"},
		{"malformed JSON", "PUT", "/v1/timers/k", `{"delay_ms":1`, "JSON"},
		{"data after the object", "PUT", "/v1/timers/k", `{"delay_ms":1} {}`, "after the JSON object"},
		// A bad key is refused before the body is read, and on every method.
		{"PUT key with a space", "PUT", "/v1/timers/a%20b", `{"delay_ms":1}`, "key"},
		{"PUT key with a slash", "PUT", "/v1/timers/a%2Fb", `{"delay_ms":1}`, "key"},
		{"PUT key non-ASCII", "PUT", "/v1/timers/caf%C3%A9", `{"delay_ms":1}`, "key"},
		{"PUT key of 201 characters", "PUT", "/v1/timers/" + key201, `{"delay_ms":1}`, "key"},
		{"PUT bad key and bad body", "PUT", "/v1/timers/a%20b", `{}`, "key"},
		{"GET key with a space", "GET", "/v1/timers/a%20b", "", "key"},
		{"GET key with a slash", "GET", "/v1/timers/a%2Fb", "", "key"},
		{"GET key of 201 characters", "GET", "/v1/timers/" + key201, "", "key"},
		{"DELETE key with a space", "DELETE", "/v1/timers/a%20b", "", "key"},
		{"DELETE key with a plus", "DELETE", "/v1/timers/a+b", "", "key"},
		{"DELETE key of 201 characters", "DELETE", "/v1/timers/" + key201, "", "key"},
		{"list limit 0", "GET", "/v1/timers?limit=0", "", "limit"},
		{"list limit 1001", "GET", "/v1/timers?limit=1001", "", "limit"},
		{"list limit abc", "GET", "/v1/timers?limit=abc", "", "limit"},
		{"list limit negative", "GET", "/v1/timers?limit=-1", "", "limit"},
		{"list limit empty", "GET", "/v1/timers?limit=", "", "limit"},
		{"list unknown status", "GET", "/v1/timers?status=done", "", "status"},
		{"list status in the wrong case", "GET", "/v1/timers?status=Fired", "", "status"},
		{"list after with a space", "GET", "/v1/timers?after=a%20b", "", "after"},
		{"list after of 201 characters", "GET", "/v1/timers?after=" + key201, "", "after"},
		{"list unknown parameter", "GET", "/v1/timers?cursor=x", "", "cursor"},
		{"list unknown parameter among good ones", "GET", "/v1/timers?limit=5&status=fired&offset=3", "", "offset"},
	}
	for _, tt := range tests {
		var body []byte
		if tt.body != "" || tt.method == "PUT" {
			body = []byte(tt.body)
		}
		status, _, raw := s.call(t, tt.method, tt.path, nil, body)
		checkError(t, tt.name, status, raw, http.StatusBadRequest, "invalid_argument")
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		json.Unmarshal(raw, &e)
		if !strings.Contains(e.Error.Message, tt.want) {
			t.Errorf("%s: message %q does not name %q", tt.name, e.Error.Message, tt.want)
		}
	}

	// Nothing was created, and the existing timer was not touched by bad
	// re-arms of it.
	for _, tt := range tests {
		if tt.method != "PUT" || tt.path != "/v1/timers/k" {
			continue
		}
		status, _, raw := s.call(t, tt.method, "/v1/timers/existing", nil, []byte(tt.body))
		checkError(t, tt.name+" (existing key)", status, raw, http.StatusBadRequest, "invalid_argument")
	}
	if got := s.timer(t, "existing"); !reflect.DeepEqual(got, existing) {
		t.Errorf("bad re-arms changed the timer: %+v, was %+v", got, existing)
	}
	l, err := s.Client.ListTimers(t.Context(), "", 0, "")
	if err != nil || len(l.Timers) != 1 || l.Timers[0].Key != "existing" {
		t.Errorf("timers after the bad requests: %+v, %v; want only \"existing\"", l, err)
	}
}

// TestTimerList pages through GET /v1/timers by key, with and without a
// status filter, to the end (next null), and checks each page's JSON.
func TestTimerList(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})

	status, _, raw := s.call(t, http.MethodGet, "/v1/timers", nil, nil)
	if status != http.StatusOK || string(raw) != `{"timers":[],"next":null}`+"\n" {
		t.Errorf("empty list: %d %s, want {\"timers\":[],\"next\":null}", status, raw)
	}

	// Keys in bytewise order: digits < upper case < lower case.
	keys := []string{"b", "A", "a:2", "a:10", "a", "0", "a.1", "Z-z", "b_", "c"}
	cancelled := map[string]bool{"A": true, "a:10": true, "b_": true}
	for i, k := range keys {
		s.armTimer(t, k, fmt.Sprintf(`{"delay_ms":%d,"payload":{"i":%d}}`, 60000+i, i), http.StatusCreated)
		if cancelled[k] {
			s.cancelTimer(t, k)
		}
	}
	sorted := slices.Sorted(slices.Values(keys))
	var scheduled, cancelledKeys []string
	for _, k := range sorted {
		if cancelled[k] {
			cancelledKeys = append(cancelledKeys, k)
		} else {
			scheduled = append(scheduled, k)
		}
	}

	// page fetches one page and checks its raw JSON: exactly timers and
	// next, each timer complete.
	page := func(query string) ([]string, *string) {
		t.Helper()
		status, _, raw := s.call(t, http.MethodGet, "/v1/timers"+query, nil, nil)
		if status != http.StatusOK {
			t.Fatalf("list %s: status %d, body %s", query, status, raw)
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(raw, &body); err != nil || len(body) != 2 || body["timers"] == nil || body["next"] == nil {
			t.Fatalf("list %s: body %s, want exactly timers and next", query, raw)
		}
		var items []json.RawMessage
		if err := json.Unmarshal(body["timers"], &items); err != nil || items == nil {
			t.Fatalf("list %s: timers %s, want an array", query, body["timers"])
		}
		var got []string
		for _, it := range items {
			tm, _ := checkTimerJSON(t, it)
			if want := "scheduled"; cancelled[tm.Key] {
				if tm.Status != "cancelled" {
					t.Errorf("list %s: %s is %s, want cancelled", query, tm.Key, tm.Status)
				}
			} else if tm.Status != want {
				t.Errorf("list %s: %s is %s, want %s", query, tm.Key, tm.Status, want)
			}
			got = append(got, tm.Key)
		}
		var next *string
		json.Unmarshal(body["next"], &next)
		return got, next
	}
	// all pages through with limit, returning every key and the pages' sizes.
	all := func(status string, limit int) ([]string, []int) {
		t.Helper()
		var out []string
		var sizes []int
		after := ""
		for range 100 {
			q := url.Values{}
			if status != "" {
				q.Set("status", status)
			}
			if limit > 0 {
				q.Set("limit", fmt.Sprint(limit))
			}
			if after != "" {
				q.Set("after", after)
			}
			got, next := page("?" + q.Encode())
			out = append(out, got...)
			sizes = append(sizes, len(got))
			if next == nil {
				return out, sizes
			}
			if *next != got[len(got)-1] {
				t.Fatalf("next = %q, want the page's last key %q", *next, got[len(got)-1])
			}
			after = *next
		}
		t.Fatalf("list status=%q limit=%d: no end after 100 pages", status, limit)
		return nil, nil
	}
	for _, tt := range []struct {
		status    string
		limit     int
		want      []string
		wantSizes []int
	}{
		{"", 0, sorted, []int{10}},
		{"", 1, sorted, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{"", 3, sorted, []int{3, 3, 3, 1}},
		{"", 5, sorted, []int{5, 5}}, // a full last page has next null: no empty page
		{"", 10, sorted, []int{10}},
		{"", 1000, sorted, []int{10}},
		{"scheduled", 2, scheduled, []int{2, 2, 2, 1}},
		{"cancelled", 2, cancelledKeys, []int{2, 1}},
		{"fired", 2, nil, []int{0}},
	} {
		got, sizes := all(tt.status, tt.limit)
		if !slices.Equal(got, tt.want) || !slices.Equal(sizes, tt.wantSizes) {
			t.Errorf("list status=%q limit=%d: keys %v in pages %v, want %v in %v", tt.status, tt.limit, got, sizes, tt.want, tt.wantSizes)
		}
	}
	// after need not be an existing key; past the last key the page is empty.
	if got, next := page("?after=a%3A5&limit=2"); !slices.Equal(got, []string{"b", "b_"}) || next == nil || *next != "b_" {
		t.Errorf("after=a:5 limit=2: %v next %v", got, next)
	}
	if got, next := page("?after=zzz"); len(got) != 0 || next != nil {
		t.Errorf("after=zzz: %v next %v, want none", got, next)
	}
	// The client reads the same pages.
	l, err := s.Client.ListTimers(t.Context(), "cancelled", 1, "A")
	if err != nil || len(l.Timers) != 1 || l.Timers[0].Key != "a:10" || l.Next == nil || *l.Next != "a:10" {
		t.Errorf("client list: %+v, %v", l, err)
	}
}

// TestTimerKeys: every character a key may have, and the keys "." and "..",
// which are dot segments in a URL: the Go client sends them percent-encoded
// and the server takes them as keys.
func TestTimerKeys(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	ctx := t.Context()
	keys := []string{".", "..", "...", ".a", "a.", "-", ":", "_", "AZaz09._:-", strings.Repeat(".", 200)}
	for _, key := range keys {
		tm, status, err := s.Client.ArmTimer(ctx, key, api.ArmTimerRequest{DelayMs: api.Delay(time.Minute), Payload: json.RawMessage(`{"key":true}`)})
		if err != nil || status != http.StatusCreated || tm.Key != key {
			t.Errorf("arm %q: %d %+v, %v", key, status, tm, err)
			continue
		}
		if got, err := s.Client.Timer(ctx, key); err != nil || got.Key != key || got.Status != "scheduled" {
			t.Errorf("get %q: %+v, %v", key, got, err)
		}
		if got, err := s.Client.CancelTimer(ctx, key); err != nil || got.Key != key || got.Status != "cancelled" {
			t.Errorf("cancel %q: %+v, %v", key, got, err)
		}
	}
	l, err := s.Client.ListTimers(ctx, "cancelled", 1000, "")
	if err != nil || len(l.Timers) != len(keys) {
		t.Errorf("list: %d timers, %v; want %d", len(l.Timers), err, len(keys))
	}
	// Over raw HTTP, %2E is the key "." and %2e%2E "..".
	if got := s.timer(t, "."); got.Key != "." {
		t.Errorf("GET /v1/timers/%%2E = %+v", got)
	}
	status, _, raw := s.call(t, http.MethodGet, "/v1/timers/%2e%2E", nil, nil)
	if tm, _ := checkTimerJSON(t, raw); status != http.StatusOK || tm.Key != ".." {
		t.Errorf("GET /v1/timers/%%2E%%2E: %d %s", status, raw)
	}
}
