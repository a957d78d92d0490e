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

// deadLetterFilter are the filter flags that turn deadletters retry and
// delete into a bulk action: GET /v1/deadletters' filters.
type deadLetterFilter struct {
	WebhookID    int64  `help:"Filter: this webhook's dead letters."`
	EventType    string `help:"Filter: dead letters of this event type (e.g. order.closed)."`
	FailedAfter  string `help:"Filter: dead letters that failed at or after this RFC 3339 time." placeholder:"RFC3339"`
	FailedBefore string `help:"Filter: dead letters that failed before this RFC 3339 time." placeholder:"RFC3339"`
}

// bulk returns whether the command acts on the filter (then the request
// for action) rather than on ids: exactly one of them.
func (d deadLetterFilter) bulk(ids []int64, action string) (bool, api.BulkRequest, error) {
	if d.WebhookID < 0 {
		return false, api.BulkRequest{}, usagef("--webhook-id must not be negative, got %d", d.WebhookID)
	}
	f := filter{}
	if d.WebhookID > 0 {
		f["webhook_id"] = fmt.Sprint(d.WebhookID)
	}
	f.set("event_type", d.EventType)
	if err := f.time("--failed-after", "failed_after", d.FailedAfter); err != nil {
		return false, api.BulkRequest{}, err
	}
	if err := f.time("--failed-before", "failed_before", d.FailedBefore); err != nil {
		return false, api.BulkRequest{}, err
	}
	switch {
	case len(f) > 0 && len(ids) > 0:
		return false, api.BulkRequest{}, usagef("give ids or a filter, not both")
	case len(f) == 0 && len(ids) == 0:
		return false, api.BulkRequest{}, usagef("give dead letters' ids, or a filter (--webhook-id, --event-type, --failed-after, --failed-before)")
	}
	return len(f) > 0, api.BulkRequest{Action: action, Filter: f}, nil
}

type deadlettersRetryCmd struct {
	IDs              []int64 `arg:"" optional:"" name:"id" help:"The dead letters' ids (at most 1000), or give a filter."`
	deadLetterFilter `embed:""`
	bulkFlags        `embed:""`
}

// Run retries each id in turn; one that fails is reported on stderr and the
// others are still tried (exit status 1 if any failed). The output is a
// list, one item per id retried. With a filter flag it retries every dead
// letter the filter selects as a bulk action (runBulk).
func (c *deadlettersRetryCmd) Run(ctx context.Context, env *opsEnv) error {
	if bulk, req, err := c.bulk(c.IDs, "retry_deadletters"); err != nil || bulk {
		if err != nil {
			return err
		}
		return runBulk(ctx, env, c.bulkFlags, "dead letters", req)
	}
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
	IDs              []int64 `arg:"" optional:"" name:"id" help:"The dead letters' ids (at most 1000), or give a filter."`
	deadLetterFilter `embed:""`
	bulkFlags        `embed:""`
}

// Run deletes each id in turn, as retry does; the output is the deleted
// dead letters. With a filter flag it deletes every dead letter the filter
// selects as a bulk action (runBulk).
func (c *deadlettersDeleteCmd) Run(ctx context.Context, env *opsEnv) error {
	if bulk, req, err := c.bulk(c.IDs, "delete_deadletters"); err != nil || bulk {
		if err != nil {
			return err
		}
		return runBulk(ctx, env, c.bulkFlags, "dead letters", req)
	}
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
