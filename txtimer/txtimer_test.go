package txtimer_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/txtimer"
)

// recorder is an Execer that records what it was asked to run.
type recorder struct {
	query string
	args  []any
}

func (r *recorder) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	r.query, r.args = query, args
	return nil, nil
}

func TestArmSQL(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 25, 10, 0, 0, 123_456_789, time.FixedZone("CST", 8*3600))
	for _, tc := range []struct {
		name      string
		table     txtimer.Table
		arm       txtimer.Arm
		wantQuery string
		wantArgs  []any
	}{
		{"postgres delay", txtimer.Table{Dialect: txtimer.Postgres}, txtimer.Arm{Key: "order:42", Delay: 30 * time.Minute, Payload: json.RawMessage(`{"order":42}`)},
			`INSERT INTO "hourglass"."timer_requests" (timer_key, action, fire_at, delay_ms, payload, webhook_id) VALUES ($1, $2, $3, $4, $5, $6)`,
			[]any{"order:42", "arm", nil, int64(1_800_000), `{"order":42}`, nil}},
		{"mysql fire_at", txtimer.Table{Name: "hg.timer_requests", Dialect: txtimer.MySQL}, txtimer.Arm{Key: "coupon.7", FireAt: at, WebhookID: 3},
			"INSERT INTO `hg`.`timer_requests` (timer_key, action, fire_at, delay_ms, payload, webhook_id) VALUES (?, ?, ?, ?, ?, ?)",
			[]any{"coupon.7", "arm", at.UTC().Truncate(time.Millisecond), nil, nil, int64(3)}},
		{"unqualified, delay 0", txtimer.Table{Name: "timer_requests", Dialect: txtimer.MySQL}, txtimer.Arm{Key: "k"},
			"INSERT INTO `timer_requests` (timer_key, action, fire_at, delay_ms, payload, webhook_id) VALUES (?, ?, ?, ?, ?, ?)",
			[]any{"k", "arm", nil, int64(0), nil, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			if err := tc.table.Arm(t.Context(), &r, tc.arm); err != nil {
				t.Fatal(err)
			}
			if r.query != tc.wantQuery {
				t.Errorf("query\n got %s\nwant %s", r.query, tc.wantQuery)
			}
			if len(r.args) != len(tc.wantArgs) {
				t.Fatalf("args = %v, want %v", r.args, tc.wantArgs)
			}
			for i := range r.args {
				if g, w := r.args[i], tc.wantArgs[i]; g != w {
					if gt, ok := g.(time.Time); !ok || !gt.Equal(w.(time.Time)) || gt.Location() != time.UTC {
						t.Errorf("arg %d = %#v, want %#v", i, g, w)
					}
				}
			}
		})
	}
}

func TestCancelSQL(t *testing.T) {
	t.Parallel()
	var r recorder
	if err := (txtimer.Table{Dialect: txtimer.Postgres}).Cancel(t.Context(), &r, "order:42"); err != nil {
		t.Fatal(err)
	}
	if want := `INSERT INTO "hourglass"."timer_requests" (timer_key, action) VALUES ($1, $2)`; r.query != want || r.args[0] != "order:42" || r.args[1] != "cancel" {
		t.Errorf("Cancel ran %s %v; want %s [order:42 cancel]", r.query, r.args, want)
	}
}

// TestRefused: what hourglass would reject fails in the caller's
// transaction, naming the column, and nothing is written.
func TestRefused(t *testing.T) {
	t.Parallel()
	pg := txtimer.Table{Dialect: txtimer.Postgres}
	for _, tc := range []struct {
		name  string
		table txtimer.Table
		arm   txtimer.Arm
		want  string
	}{
		{"bad key", pg, txtimer.Arm{Key: "order 42"}, "key"},
		{"empty key", pg, txtimer.Arm{}, "key"},
		{"long key", pg, txtimer.Arm{Key: strings.Repeat("k", 201)}, "key"},
		{"both times", pg, txtimer.Arm{Key: "k", FireAt: time.Now(), Delay: time.Second}, "fire_at and delay_ms"},
		{"sub-millisecond delay", pg, txtimer.Arm{Key: "k", Delay: 1500 * time.Microsecond}, "delay_ms"},
		{"negative delay", pg, txtimer.Arm{Key: "k", Delay: -time.Second}, "delay_ms"},
		{"delay over a year", pg, txtimer.Arm{Key: "k", Delay: 366 * 24 * time.Hour}, "delay_ms"},
		{"payload not an object", pg, txtimer.Arm{Key: "k", Payload: json.RawMessage(`[1]`)}, "payload"},
		{"payload too big", pg, txtimer.Arm{Key: "k", Payload: json.RawMessage(`{"a":"` + strings.Repeat("x", 64<<10) + `"}`)}, "payload"},
		{"negative webhook", pg, txtimer.Arm{Key: "k", WebhookID: -1}, "webhook_id"},
		{"no dialect", txtimer.Table{}, txtimer.Arm{Key: "k"}, "Dialect"},
		{"bad table", txtimer.Table{Name: "timer_requests; DROP TABLE orders", Dialect: txtimer.MySQL}, txtimer.Arm{Key: "k"}, "table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			err := tc.table.Arm(t.Context(), &r, tc.arm)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Arm = %v, want an error naming %q", err, tc.want)
			}
			if r.query != "" {
				t.Errorf("ran %s after refusing", r.query)
			}
			if strings.HasPrefix(tc.name, "no dialect") || strings.HasPrefix(tc.name, "bad table") {
				return
			}
			if hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument {
				t.Errorf("code %q, want %q", hourglass.ErrorCode(err), hourglass.CodeInvalidArgument)
			}
		})
	}
	if err := pg.Cancel(t.Context(), &recorder{}, "bad key"); err == nil {
		t.Error("Cancel accepted a bad key")
	}
}
