package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/cliout"
)

// deadLetterColumns are the columns of a dead-letter table.
var deadLetterColumns = []cliout.Column[api.DeadLetterJSON]{
	{Header: "ID", Cell: func(d api.DeadLetterJSON) string { return fmt.Sprint(d.ID) }},
	{Header: "WEBHOOK", Cell: func(d api.DeadLetterJSON) string { return fmt.Sprint(d.WebhookID) }},
	{Header: "EVENT_TYPE", Cell: func(d api.DeadLetterJSON) string { return d.EventType }},
	{Header: "ORDER", Cell: func(d api.DeadLetterJSON) string {
		if d.OrderID == 0 {
			return ""
		}
		return fmt.Sprint(d.OrderID)
	}},
	{Header: "ATTEMPTS", Cell: func(d api.DeadLetterJSON) string { return fmt.Sprint(d.Attempts) }},
	{Header: "FAILED_AT", Cell: func(d api.DeadLetterJSON) string { return d.FailedAt }},
	{Header: "LAST_ERROR", Cell: func(d api.DeadLetterJSON) string { return cliout.Truncate(d.LastError, 60) }},
}

var retryColumns = []cliout.Column[api.RetryJSON]{
	{Header: "ID", Cell: func(r api.RetryJSON) string { return fmt.Sprint(r.ID) }},
	{Header: "STATUS", Cell: func(r api.RetryJSON) string { return r.Status }},
}

type deadlettersListCmd struct {
	WebhookID    int64  `help:"Only this webhook's dead letters."`
	EventType    string `help:"Only dead letters of this event type (e.g. order.closed)."`
	FailedAfter  string `help:"Only dead letters that failed at or after this RFC 3339 time (the list is then by failure time)." placeholder:"RFC3339"`
	FailedBefore string `help:"Only dead letters that failed before this RFC 3339 time (the list is then by failure time)." placeholder:"RFC3339"`
	listFlags    `embed:""`
}

func (c *deadlettersListCmd) Run(ctx context.Context, env *opsEnv) error {
	if c.WebhookID < 0 {
		return usagef("--webhook-id must not be negative, got %d", c.WebhookID)
	}
	q := api.DeadLetterQuery{WebhookID: c.WebhookID, EventType: c.EventType}
	var err error
	if q.FailedAfter, err = parseTime("--failed-after", c.FailedAfter); err != nil {
		return err
	}
	if q.FailedBefore, err = parseTime("--failed-before", c.FailedBefore); err != nil {
		return err
	}
	return list(env, c.listFlags, api.MaxDeadLetterLimit, deadLetterColumns, func(limit int, after string) ([]api.DeadLetterJSON, string, error) {
		q.Limit, q.After = limit, after
		p, err := env.client.FindDeadLetters(ctx, q)
		return p.DeadLetters, p.Next, err
	})
}

// maxIDs bounds the ids of one retry or delete: one request each.
const maxIDs = 1000

type deadlettersRetryCmd struct {
	IDs []int64 `arg:"" name:"id" help:"The dead letters' ids (at most 1000)."`
}

// Run retries each id in turn; one that fails is reported on stderr and the
// others are still tried (exit status 1 if any failed). The output is a
// list, one item per id retried.
func (c *deadlettersRetryCmd) Run(ctx context.Context, env *opsEnv) error {
	out := cliout.NewList(env.stdout, env.format, retryColumns)
	return eachID(env, c.IDs, out, func(id int64) (api.RetryJSON, error) {
		if err := env.client.RetryDeadLetter(ctx, id); err != nil {
			return api.RetryJSON{}, err
		}
		// The API's answer to a retry is always this: pending, due now.
		return api.RetryJSON{ID: id, Status: "pending"}, nil
	})
}

type deadlettersDeleteCmd struct {
	IDs []int64 `arg:"" name:"id" help:"The dead letters' ids (at most 1000)."`
}

// Run deletes each id in turn, as retry does; the output is the deleted
// dead letters.
func (c *deadlettersDeleteCmd) Run(ctx context.Context, env *opsEnv) error {
	out := cliout.NewList(env.stdout, env.format, deadLetterColumns)
	return eachID(env, c.IDs, out, func(id int64) (api.DeadLetterJSON, error) {
		return env.client.DeleteDeadLetter(ctx, id)
	})
}

// eachID applies act to each id, writing what it returns to out. An API
// error for one id is printed and the next id tried (then errReported is
// returned); a network error ends it at once (the server is not answering).
func eachID[T any](env *opsEnv, ids []int64, out *cliout.List[T], act func(int64) (T, error)) error {
	if len(ids) > maxIDs {
		return usagef("at most %d ids, got %d", maxIDs, len(ids))
	}
	var last error
	for _, id := range ids {
		v, err := act(id)
		var ae *api.Error
		if errors.As(err, &ae) {
			fmt.Fprintf(env.stderr, "hourglass: dead letter %d: %s: %s\n", id, ae.Code, ae.Message)
			last = errReported
			continue
		}
		if err != nil {
			out.Close()
			return err
		}
		out.Add(v)
	}
	if err := out.Close(); err != nil {
		return err
	}
	return last
}
