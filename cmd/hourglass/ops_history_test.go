package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestHistoryCommands: `orders history` and `timers history` print the
// API's document with -o json and -o jsonl, the timing and the timeline as
// a table; an unknown id or key exits 1 with the API's code, a malformed
// one 2.
func TestHistoryCommands(t *testing.T) {
	t.Setenv("HOURGLASS_API_TOKEN", opsToken)
	s := startOpsServer(t)
	orders := s.createOrders(t, "ann")
	id := orders[0].ID
	if _, err := s.client.ExtendOrder(t.Context(), id, api.ExtendOrderRequest{ExtendMs: 60_000}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.client.ArmTimer(t.Context(), "cli:history", api.ArmTimerRequest{DelayMs: api.Delay(0)}); err != nil {
		t.Fatal(err)
	}
	var h api.HistoryJSON
	s.ok(t, &h, "orders", "history", strconv.FormatInt(id, 10))
	if h.Kind != "order" || len(h.Events) != 2 || h.Events[1].Type != "order.extended" || len(h.Timing.Deadlines) != 2 || h.Timing.ClosedAt != nil {
		t.Fatalf("orders history -o json = %+v", h)
	}
	code, stdout, stderr := s.run(t, "orders", "history", strconv.FormatInt(id, 10), "-o", "jsonl")
	if lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n"); code != 0 || len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &h) != nil {
		t.Fatalf("orders history -o jsonl: exit %d, stderr %s, stdout %q; want one JSON line", code, stderr, stdout)
	}
	lines := s.table(t, "DEADLINE CLOSED LATENESS_MS CLOSED_BY NODE DEADLINES", "orders", "history", strconv.FormatInt(id, 10))
	if !strings.Contains(strings.Join(lines, "\n"), "order.extended") || !strings.Contains(strings.Join(lines, "\n"), "TIME") {
		t.Errorf("orders history table:\n%s", strings.Join(lines, "\n"))
	}

	testenv.Eventually(t, 10*time.Second, "the timer fired", func() bool {
		h = api.HistoryJSON{}
		code, stdout, _ := s.run(t, "timers", "history", "cli:history", "-o", "json")
		return code == 0 && json.Unmarshal([]byte(stdout), &h) == nil && h.Timing.ClosedAt != nil
	})
	if h.Kind != "timer" || h.Timing.ClosedBy == nil || *h.Timing.ClosedBy == api.Unknown || h.Timing.Node == nil || *h.Timing.Node == api.Unknown {
		t.Fatalf("timers history = %+v; want a fire with its cause and node", h.Timing)
	}
	lines = s.table(t, "DEADLINE CLOSED LATENESS_MS CLOSED_BY NODE DEADLINES", "timers", "history", "cli:history")
	if !strings.Contains(strings.Join(lines, "\n"), "timer.fired") {
		t.Errorf("timers history table:\n%s", strings.Join(lines, "\n"))
	}

	s.fails(t, 1, "not_found", "orders", "history", "999999999")
	s.fails(t, 1, "not_found", "timers", "history", "no-such-timer")
	s.fails(t, 1, "invalid_argument", "timers", "history", "bad key")
	s.fails(t, 2, "", "orders", "history", "x")
	s.fails(t, 2, "", "orders", "history")
}
