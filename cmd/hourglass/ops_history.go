package main

import (
	"context"
	"fmt"
	"io"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/cliout"
)

// ordersHistoryCmd and timersHistoryCmd print one thing's whole story (GET
// /v1/orders/{id}/history, /v1/timers/{key}/history): as JSON, the API's
// document; as a table, its timing, then its timeline (each event and
// each stored delivery of it).
type ordersHistoryCmd struct {
	ID int64 `arg:"" help:"The order's id."`
}

func (c *ordersHistoryCmd) Run(ctx context.Context, env *opsEnv) error {
	h, err := env.client.OrderHistory(ctx, c.ID)
	if err != nil {
		return err
	}
	return writeHistory(env, h)
}

type timersHistoryCmd struct {
	Key string `arg:"" help:"The timer's key."`
}

func (c *timersHistoryCmd) Run(ctx context.Context, env *opsEnv) error {
	h, err := env.client.TimerHistory(ctx, c.Key)
	if err != nil {
		return err
	}
	return writeHistory(env, h)
}

// timingColumns are the columns of a history's timing.
var timingColumns = []cliout.Column[api.TimingJSON]{
	{Header: "DEADLINE", Cell: func(t api.TimingJSON) string { return cliout.Opt(t.Deadline) }},
	{Header: "CLOSED", Cell: func(t api.TimingJSON) string { return cliout.Opt(t.ClosedAt) }},
	{Header: "LATENESS_MS", Cell: func(t api.TimingJSON) string { return optInt64(t.LatenessMs) }},
	{Header: "CLOSED_BY", Cell: func(t api.TimingJSON) string { return cliout.Opt(t.ClosedBy) }},
	{Header: "NODE", Cell: func(t api.TimingJSON) string { return cliout.Opt(t.Node) }},
	{Header: "DEADLINES", Cell: func(t api.TimingJSON) string { return fmt.Sprint(len(t.Deadlines)) }},
}

// timelineRow is one line of a history's timeline: an event, a delivery
// of one, or an attempt of a delivery.
type timelineRow struct {
	at, what, deadline, by, node, detail string
}

var timelineColumns = []cliout.Column[timelineRow]{
	{Header: "TIME", Cell: func(r timelineRow) string { return r.at }},
	{Header: "WHAT", Cell: func(r timelineRow) string { return r.what }},
	{Header: "DEADLINE", Cell: func(r timelineRow) string { return r.deadline }},
	{Header: "CLOSED_BY", Cell: func(r timelineRow) string { return r.by }},
	{Header: "NODE", Cell: func(r timelineRow) string { return r.node }},
	{Header: "DETAIL", Cell: func(r timelineRow) string { return r.detail }},
}

// writeHistory writes h: the document in JSON or JSONL; a table of its
// timing and one of its timeline otherwise, and a note on stderr when the
// server left events or deliveries out.
func writeHistory(env *opsEnv, h api.HistoryJSON) error {
	if env.format != cliout.Table {
		return cliout.WriteOne(env.stdout, env.format, nil, h)
	}
	if err := cliout.WriteOne(env.stdout, env.format, timingColumns, h.Timing); err != nil {
		return err
	}
	if _, err := io.WriteString(env.stdout, "\n"); err != nil {
		return err
	}
	out := cliout.NewList(env.stdout, env.format, timelineColumns)
	for _, e := range h.Events {
		out.Add(timelineRow{at: e.CreatedAt, what: e.Type, deadline: cliout.Opt(e.Deadline), by: cliout.Opt(e.ClosedBy), node: cliout.Opt(e.Node)})
		for _, d := range e.Deliveries {
			at := d.NextAttemptAt
			if d.FailedAt != nil {
				at = d.FailedAt
			}
			detail := fmt.Sprintf("%s, %d attempts", d.State, d.AttemptCount)
			if d.LastError != nil {
				detail += ": " + cliout.Truncate(*d.LastError, 80)
			}
			out.Add(timelineRow{at: cliout.Opt(at), what: fmt.Sprintf("  delivery %d to webhook %d", d.ID, d.WebhookID), detail: detail})
			for _, a := range d.Attempts {
				status := "no answer"
				if a.StatusCode != nil {
					status = fmt.Sprintf("HTTP %d", *a.StatusCode)
				}
				detail := fmt.Sprintf("%s in %dms (%s)", status, a.DurationMs, a.Outcome)
				if a.Error != nil {
					detail += ": " + cliout.Truncate(*a.Error, 80)
				}
				out.Add(timelineRow{at: cliout.Opt(a.At), what: fmt.Sprintf("    attempt %d", a.Attempt), detail: detail})
			}
		}
	}
	if err := out.Close(); err != nil {
		return err
	}
	if h.EventsTruncated || h.DeliveriesTruncated || h.AttemptsTruncated {
		fmt.Fprintln(env.stderr, "hourglass: the server left earlier events, some deliveries or earlier attempts out (its bounds); -o json shows what it sent")
	}
	return nil
}
