package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestBulkBadInput: every malformed POST /v1/bulk-actions, POST
// /v1/timers/batch and bulk read is a 4xx naming the problem, and changes
// nothing.
func TestBulkBadInput(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.armTimer(t, "keep", `{"delay_ms":600000}`, http.StatusCreated)
	ids := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprint(&b, i+1)
		}
		return b.String()
	}
	keys := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"key":"k%d","delay_ms":1000}`, i)
		}
		return b.String()
	}
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		code, mentions           string
	}{
		{"unknown action", "POST", "/v1/bulk-actions", `{"action":"explode","reason":"r","ids":[1]}`, 400, "invalid_argument", "action"},
		{"no action", "POST", "/v1/bulk-actions", `{"reason":"r","ids":[1]}`, 400, "invalid_argument", "action"},
		{"missing reason", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","ids":[1]}`, 400, "invalid_argument", "reason"},
		{"blank reason", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"  ","ids":[1]}`, 400, "invalid_argument", "reason"},
		{"long reason", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"` + strings.Repeat("x", 501) + `","ids":[1]}`, 400, "invalid_argument", "reason"},
		{"both ids and filter", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","ids":[1],"filter":{"status":"pending_payment"}}`, 400, "invalid_argument", "exactly one"},
		{"neither", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r"}`, 400, "invalid_argument", "exactly one"},
		{"1001 ids", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","ids":[` + ids(1001) + `]}`, 400, "invalid_argument", "at most 1000"},
		{"empty ids", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","ids":[]}`, 400, "invalid_argument", "empty"},
		{"id twice", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","ids":[3,3]}`, 400, "invalid_argument", "twice"},
		{"id not a number", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","ids":["x"]}`, 400, "invalid_argument", "ids[0]"},
		{"bad timer key", "POST", "/v1/bulk-actions", `{"action":"cancel_timers","reason":"r","ids":["a b"]}`, 400, "invalid_argument", "ids[0]"},
		{"unknown filter field", "POST", "/v1/bulk-actions", `{"action":"cancel_timers","reason":"r","filter":{"colour":"red"}}`, 400, "invalid_argument", "colour"},
		{"order filter for timers", "POST", "/v1/bulk-actions", `{"action":"cancel_timers","reason":"r","filter":{"user_id":"u1"}}`, 400, "invalid_argument", "user_id"},
		{"bad filter status", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","filter":{"status":"lost"}}`, 400, "invalid_argument", "status"},
		{"bad filter time", "POST", "/v1/bulk-actions", `{"action":"retry_deadletters","reason":"r","filter":{"failed_after":"yesterday"}}`, 400, "invalid_argument", "failed_after"},
		{"bad filter prefix", "POST", "/v1/bulk-actions", `{"action":"cancel_timers","reason":"r","filter":{"prefix":"a b"}}`, 400, "invalid_argument", "prefix"},
		{"filter value an object", "POST", "/v1/bulk-actions", `{"action":"cancel_timers","reason":"r","filter":{"prefix":{}}}`, 400, "invalid_argument", "prefix"},
		{"rate with ids", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","ids":[1],"rate":5}`, 400, "invalid_argument", "rate"},
		{"rate zero", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","filter":{},"rate":0}`, 400, "invalid_argument", "rate"},
		{"extend without extend", "POST", "/v1/bulk-actions", `{"action":"extend_orders","reason":"r","ids":[1]}`, 400, "invalid_argument", "extend"},
		{"extend for a cancel", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","ids":[1],"extend":{"extend_ms":1000}}`, 400, "invalid_argument", "extend"},
		{"extend by deadline range", "POST", "/v1/bulk-actions", `{"action":"extend_orders","reason":"r","filter":{"deadline_before":"2030-01-01T00:00:00Z"},"extend":{"extend_ms":1000}}`, 400, "invalid_argument", "deadline_before"},
		{"bad extend", "POST", "/v1/bulk-actions", `{"action":"extend_orders","reason":"r","ids":[1],"extend":{"extend_ms":0}}`, 400, "invalid_argument", "extend_ms"},
		{"unknown field", "POST", "/v1/bulk-actions", `{"action":"cancel_orders","reason":"r","ids":[1],"force":true}`, 400, "invalid_argument", "force"},
		{"not JSON", "POST", "/v1/bulk-actions", `action=cancel`, 400, "invalid_argument", "JSON"},
		{"bad id", "GET", "/v1/bulk-actions/a%20b", "", 400, "invalid_argument", "id"},
		{"unknown id", "GET", "/v1/bulk-actions/0123abc", "", 404, "not_found", "0123abc"},
		{"stop unknown", "POST", "/v1/bulk-actions/0123abc/stop", "", 404, "not_found", "0123abc"},
		{"stop with a body", "POST", "/v1/bulk-actions/0123abc/stop", `{"now":true}`, 400, "invalid_argument", ""},
		{"list bad limit", "GET", "/v1/bulk-actions?limit=1000", "", 400, "invalid_argument", "limit"},
		{"list unknown parameter", "GET", "/v1/bulk-actions?state=running", "", 400, "invalid_argument", "state"},
		{"batch empty", "POST", "/v1/timers/batch", `{}`, 400, "invalid_argument", "at least one"},
		{"batch 1001 items", "POST", "/v1/timers/batch", `{"arm":[` + keys(1000) + `],"cancel":["x"]}`, 400, "invalid_argument", "at most 1000"},
		{"batch key twice", "POST", "/v1/timers/batch", `{"arm":[{"key":"a","delay_ms":1}],"cancel":["a"]}`, 400, "invalid_argument", "at most once"},
		{"batch arm twice", "POST", "/v1/timers/batch", `{"arm":[{"key":"a","delay_ms":1},{"key":"a","delay_ms":2}]}`, 400, "invalid_argument", "arm[1]"},
		{"batch bad arm", "POST", "/v1/timers/batch", `{"arm":[{"key":"a","delay_ms":1},{"key":"b","delay_ms":1,"fire_at":"2026-01-01T00:00:00Z"}]}`, 400, "invalid_argument", "arm[1]"},
		{"batch bad payload", "POST", "/v1/timers/batch", `{"arm":[{"key":"a","delay_ms":1,"payload":[1]}]}`, 400, "invalid_argument", "arm[0]"},
		{"batch bad cancel key", "POST", "/v1/timers/batch", `{"cancel":["ok","a b"]}`, 400, "invalid_argument", "cancel[1]"},
		{"batch unknown webhook", "POST", "/v1/timers/batch", `{"arm":[{"key":"a","delay_ms":1,"webhook_id":999}]}`, 400, "invalid_argument", "arm[0]"},
		{"batch unknown field", "POST", "/v1/timers/batch", `{"arm":[{"key":"a","delay_ms":1,"colour":"red"}]}`, 400, "invalid_argument", "colour"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			status, _, raw := s.call(t, c.method, c.path, nil, body)
			if status != c.status {
				t.Fatalf("status %d, want %d: %s", status, c.status, raw)
			}
			code, msg := bodyError(t, raw)
			if code != c.code || !strings.Contains(msg, c.mentions) {
				t.Fatalf("error %s %q, want %s mentioning %q", code, msg, c.code, c.mentions)
			}
		})
	}
	// Nothing changed: the timer is scheduled, no timer a, no action.
	if tm := s.timer(t, "keep"); tm.Status != "scheduled" {
		t.Fatalf("keep is %s", tm.Status)
	}
	if status, _, _ := s.call(t, "GET", "/v1/timers/a", nil, nil); status != http.StatusNotFound {
		t.Fatalf("timer a: %d, want 404", status)
	}
	if l, err := s.Client.BulkActions(t.Context(), 10, ""); err != nil || len(l.BulkActions) != 0 {
		t.Fatalf("actions: %+v %v", l, err)
	}
}

func bodyError(t *testing.T, raw []byte) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("error body %q: %v", raw, err)
	}
	return e.Error.Code, e.Error.Message
}

// TestTimerBatch: arms and cancels in one call, one result per item in
// order (arms then cancels), each refused alone; a repeat of the same arms
// creates nothing.
func TestTimerBatch(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.armTimer(t, "old", `{"delay_ms":600000}`, http.StatusCreated)
	s.armTimer(t, "gone", `{"delay_ms":600000}`, http.StatusCreated)
	fireAt := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	req := api.TimerBatchRequest{
		Arm: []api.TimerBatchArm{
			{Key: "b:1", DelayMs: ptr(int64(600000)), Payload: json.RawMessage(`{"n":1}`)},
			{Key: "b:2", FireAt: &fireAt},
			{Key: "old", DelayMs: ptr(int64(700000))},
		},
		Cancel: []string{"nope", "gone"},
	}
	check := func(res api.TimerBatchJSON, created bool) {
		t.Helper()
		want := []struct {
			key, op string
			created bool
			code    string
		}{{"b:1", "arm", created, ""}, {"b:2", "arm", created, ""}, {"old", "arm", false, ""}, {"nope", "cancel", false, "not_found"}, {"gone", "cancel", false, ""}}
		if len(res.Results) != len(want) {
			t.Fatalf("%d results: %+v", len(res.Results), res)
		}
		for i, w := range want {
			r := res.Results[i]
			code := ""
			if r.Error != nil {
				code = r.Error.Code
			}
			if r.Key != w.key || r.Op != w.op || r.Created != w.created || code != w.code || (code == "") == (string(r.Timer) == "null") {
				t.Errorf("result %d: %+v (timer %s), want %+v", i, r, r.Timer, w)
			}
		}
	}
	res, err := s.Client.TimerBatch(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	check(res, true)
	if tm := s.timer(t, "b:1"); string(tm.Payload) != `{"n":1}` || tm.Status != "scheduled" {
		t.Fatalf("b:1: %+v", tm)
	}
	if tm := s.timer(t, "gone"); tm.Status != "cancelled" {
		t.Fatalf("gone: %+v", tm)
	}
	res, err = s.Client.TimerBatch(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	check(res, false)
}

func ptr[T any](v T) *T { return &v }

// TestBulkFilterFlow: a dry run counts; a filtered cancel of timers by
// prefix runs to done in the background with its counts; the same action
// and filter while one runs returns the running one; a stop halts it
// within a second; ids apply in one call with each item's result.
func TestBulkFilterFlow(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	ctx := t.Context()
	batch := api.TimerBatchRequest{}
	for i := range 40 {
		batch.Arm = append(batch.Arm, api.TimerBatchArm{Key: fmt.Sprintf("coupon:spring:%02d", i), DelayMs: ptr(int64(3600_000))})
	}
	for i := range 5 {
		batch.Arm = append(batch.Arm, api.TimerBatchArm{Key: fmt.Sprintf("coupon:summer:%02d", i), DelayMs: ptr(int64(3600_000))})
	}
	if res, err := s.Client.TimerBatch(ctx, batch); err != nil || len(res.Results) != 45 || !res.Results[0].Created || res.Results[44].Error != nil {
		t.Fatalf("arm: %v %+v", err, res.Results[0])
	}
	req := api.BulkRequest{Action: "cancel_timers", Reason: "campaign ended", Filter: map[string]string{"prefix": "coupon:spring:"}}
	n, err := s.Client.BulkCount(ctx, req)
	if err != nil || n.Matched != 40 || n.More {
		t.Fatalf("dry run: %+v %v", n, err)
	}
	// Slow (2 a second): the same request again finds it running.
	slow := req
	slow.Rate = 2
	a, created, err := s.Client.StartBulkAction(ctx, slow)
	if err != nil || !created || a.State != "running" || a.Reason != "campaign ended" || a.Rate != 2 {
		t.Fatalf("start: %+v %v %v", a, created, err)
	}
	again, created, err := s.Client.StartBulkAction(ctx, slow)
	if err != nil || created || again.ID != a.ID {
		t.Fatalf("again: %+v %v %v, want %s", again, created, err, a.ID)
	}
	testenv.Eventually(t, 10*time.Second, "some done", func() bool {
		got, err := s.Client.BulkAction(ctx, a.ID)
		return err == nil && got.Done >= 1
	})
	start := time.Now()
	stopped, err := s.Client.StopBulkAction(ctx, a.ID)
	if err != nil || stopped.State != "stopped" || stopped.FinishedAt == nil {
		t.Fatalf("stop: %+v %v", stopped, err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("stop took %v", took)
	}
	time.Sleep(1200 * time.Millisecond) // past the next page the rate allows
	after, _ := s.Client.BulkAction(ctx, a.ID)
	if after.Done != stopped.Done || after.State != "stopped" {
		t.Fatalf("after stop: %+v, stopped at %+v", after, stopped)
	}
	// Unbounded: runs to done.
	b, created, err := s.Client.StartBulkAction(ctx, req)
	if err != nil || !created || b.ID == a.ID {
		t.Fatalf("start 2: %+v %v %v", b, created, err)
	}
	var done api.BulkActionJSON
	testenv.Eventually(t, 20*time.Second, "done", func() bool {
		done, err = s.Client.BulkAction(ctx, b.ID)
		return err == nil && done.State != "running"
	})
	if done.State != "done" || done.Done+stopped.Done != 40 || done.Failed != 0 || done.FinishedAt == nil {
		t.Fatalf("done: %+v (first stopped after %d)", done, stopped.Done)
	}
	l, err := s.Client.FindTimers(ctx, api.TimerQuery{Status: "scheduled", Prefix: "coupon:", Limit: 100})
	if err != nil || len(l.Timers) != 5 || !strings.HasPrefix(l.Timers[0].Key, "coupon:summer:") {
		t.Fatalf("coupon timers still scheduled: %d %v", len(l.Timers), err)
	}
	list, err := s.Client.BulkActions(ctx, 1, "")
	if err != nil || len(list.BulkActions) != 1 || list.BulkActions[0].ID != b.ID || list.Next == nil {
		t.Fatalf("list: %+v %v", list, err)
	}
	list, err = s.Client.BulkActions(ctx, 10, *list.Next)
	if err != nil || len(list.BulkActions) != 1 || list.BulkActions[0].ID != a.ID || list.Next != nil {
		t.Fatalf("list page 2: %+v %v", list, err)
	}
	// By ids: one call, each item's result in order.
	res, err := s.Client.BulkByIDs(ctx, api.BulkRequest{Action: "cancel_timers", Reason: "r", IDs: []any{"coupon:summer:00", "nope", "coupon:spring:00"}})
	if err != nil || res.Done != 1 || res.Failed != 1 || len(res.Results) != 3 {
		t.Fatalf("ids: %+v %v", res, err)
	}
	if !res.Results[0].Done || res.Results[1].Error == nil || res.Results[1].Error.Code != "not_found" || res.Results[2].Done || res.Results[2].Error != nil {
		t.Fatalf("ids results: %+v", res.Results)
	}
}
