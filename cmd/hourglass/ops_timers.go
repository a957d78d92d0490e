package main

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/cliout"
)

// timerColumns are the columns of a timer table.
var timerColumns = []cliout.Column[api.TimerJSON]{
	{Header: "KEY", Cell: func(t api.TimerJSON) string { return t.Key }},
	{Header: "STATUS", Cell: func(t api.TimerJSON) string { return t.Status }},
	{Header: "FIRE_AT", Cell: func(t api.TimerJSON) string { return t.FireAt }},
	{Header: "FIRED_AT", Cell: func(t api.TimerJSON) string { return cliout.Opt(t.FiredAt) }},
	{Header: "WEBHOOK", Cell: func(t api.TimerJSON) string { return optInt64(t.WebhookID) }},
	{Header: "PAYLOAD", Cell: func(t api.TimerJSON) string {
		if string(t.Payload) == "null" {
			return ""
		}
		return cliout.Truncate(string(t.Payload), 60)
	}},
}

type timersGetCmd struct {
	Key string `arg:"" help:"The timer's key."`
}

func (c *timersGetCmd) Run(ctx context.Context, env *opsEnv) error {
	return one(env, timerColumns)(env.client.Timer(ctx, c.Key))
}

type timersListCmd struct {
	Status     string `help:"Only timers in this status (scheduled, fired, cancelled)."`
	Prefix     string `help:"Only timers whose key starts with this."`
	FireAfter  string `help:"Only timers firing at or after this RFC 3339 time (the list is then by fire time)." placeholder:"RFC3339"`
	FireBefore string `help:"Only timers firing before this RFC 3339 time (the list is then by fire time)." placeholder:"RFC3339"`
	listFlags  `embed:""`
}

func (c *timersListCmd) Run(ctx context.Context, env *opsEnv) error {
	q := api.TimerQuery{Status: c.Status, Prefix: c.Prefix}
	var err error
	if q.FireAfter, err = parseTime("--fire-after", c.FireAfter); err != nil {
		return err
	}
	if q.FireBefore, err = parseTime("--fire-before", c.FireBefore); err != nil {
		return err
	}
	return list(env, c.listFlags, api.MaxTimerLimit, timerColumns, func(limit int, after string) ([]api.TimerJSON, string, error) {
		q.Limit, q.After = limit, after
		p, err := env.client.FindTimers(ctx, q)
		return p.Timers, cliout.Opt(p.Next), err
	})
}

type timersArmCmd struct {
	Key       string        `arg:"" help:"The timer's key."`
	FireAt    string        `help:"When it fires: an RFC 3339 time." placeholder:"RFC3339" xor:"when"`
	Delay     time.Duration `help:"When it fires: this long from now (e.g. 90s, at least 1ms)." xor:"when"`
	Payload   string        `help:"A JSON object delivered with timer.fired." placeholder:"JSON"`
	WebhookID int64         `help:"The webhook to deliver timer.fired to (0: every webhook subscribed to it)."`
}

func (c *timersArmCmd) Run(ctx context.Context, env *opsEnv) error {
	var req api.ArmTimerRequest
	switch {
	case c.FireAt != "" && c.Delay != 0:
		return usagef("give one of --fire-at and --delay, not both")
	case c.FireAt != "":
		t, err := parseTime("--fire-at", c.FireAt)
		if err != nil {
			return err
		}
		req.FireAt = t.Format(time.RFC3339Nano)
	case c.Delay != 0:
		if c.Delay < time.Millisecond {
			return usagef("--delay must be at least 1ms, got %s", c.Delay)
		}
		req.DelayMs = api.Delay(c.Delay)
	default:
		return usagef("give one of --fire-at and --delay")
	}
	if c.Payload != "" {
		if !json.Valid([]byte(c.Payload)) {
			return usagef("--payload: not valid JSON: %s", cliout.Truncate(c.Payload, 60))
		}
		req.Payload = json.RawMessage(c.Payload)
	}
	if c.WebhookID < 0 {
		return usagef("--webhook-id must not be negative, got %d", c.WebhookID)
	}
	req.WebhookID = c.WebhookID
	t, _, err := env.client.ArmTimer(ctx, c.Key, req)
	return one(env, timerColumns)(t, err)
}

type timersCancelCmd struct {
	Key        string `arg:"" optional:"" help:"The timer's key (or give a filter)."`
	Status     string `help:"Filter: timers in this status (default: scheduled)."`
	Prefix     string `help:"Filter: timers whose key starts with this."`
	FireAfter  string `help:"Filter: timers firing at or after this RFC 3339 time." placeholder:"RFC3339"`
	FireBefore string `help:"Filter: timers firing before this RFC 3339 time." placeholder:"RFC3339"`
	bulkFlags  `embed:""`
}

// Run cancels the timer Key, or, with a filter flag, every timer the
// filter selects as a bulk action (runBulk).
func (c *timersCancelCmd) Run(ctx context.Context, env *opsEnv) error {
	f := filter{}
	f.set("status", c.Status)
	f.set("prefix", c.Prefix)
	if err := f.time("--fire-after", "fire_after", c.FireAfter); err != nil {
		return err
	}
	if err := f.time("--fire-before", "fire_before", c.FireBefore); err != nil {
		return err
	}
	switch {
	case len(f) > 0 && c.Key != "":
		return usagef("give a key or a filter, not both")
	case len(f) > 0:
		return runBulk(ctx, env, c.bulkFlags, "timers", api.BulkRequest{Action: "cancel_timers", Filter: f})
	case c.Key == "":
		return usagef("give a timer's key, or a filter (--prefix, --status, --fire-after, --fire-before)")
	}
	return one(env, timerColumns)(env.client.CancelTimer(ctx, c.Key))
}
