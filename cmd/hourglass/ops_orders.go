package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/cliout"
)

// orderColumns are the columns of an order table.
var orderColumns = []cliout.Column[api.OrderJSON]{
	{Header: "ID", Cell: func(o api.OrderJSON) string { return fmt.Sprint(o.ID) }},
	{Header: "USER", Cell: func(o api.OrderJSON) string { return o.UserID }},
	{Header: "STATUS", Cell: func(o api.OrderJSON) string { return o.Status }},
	{Header: "ITEMS", Cell: orderItems},
	{Header: "CREATED", Cell: func(o api.OrderJSON) string { return o.CreatedAt }},
	{Header: "DEADLINE", Cell: func(o api.OrderJSON) string { return o.Deadline }},
	{Header: "CLOSED", Cell: func(o api.OrderJSON) string { return cliout.Opt(o.ClosedAt) }},
	{Header: "REASON", Cell: func(o api.OrderJSON) string { return cliout.Opt(o.CloseReason) }},
}

// orderItems is "sku×quantity" for each item, at most 60 characters.
func orderItems(o api.OrderJSON) string {
	parts := make([]string, len(o.Items))
	for i, it := range o.Items {
		parts[i] = fmt.Sprintf("%s×%d", it.SKU, it.Quantity)
	}
	return cliout.Truncate(strings.Join(parts, ","), 60)
}

type ordersGetCmd struct {
	ID int64 `arg:"" help:"The order's id."`
}

func (c *ordersGetCmd) Run(ctx context.Context, env *opsEnv) error {
	return one(env, orderColumns)(env.client.Order(ctx, c.ID))
}

type ordersListCmd struct {
	Status         string `help:"Only orders in this status (pending_payment, paid, shipped, completed, cancelled, closed)."`
	UserID         string `help:"Only this user's orders."`
	DeadlineAfter  string `help:"Only orders whose deadline is at or after this RFC 3339 time (the list is then by deadline)." placeholder:"RFC3339"`
	DeadlineBefore string `help:"Only orders whose deadline is before this RFC 3339 time (the list is then by deadline)." placeholder:"RFC3339"`
	CreatedAfter   string `help:"Only orders created at or after this RFC 3339 time (the list is then by creation)." placeholder:"RFC3339"`
	CreatedBefore  string `help:"Only orders created before this RFC 3339 time (the list is then by creation)." placeholder:"RFC3339"`
	listFlags      `embed:""`
}

func (c *ordersListCmd) Run(ctx context.Context, env *opsEnv) error {
	q := api.OrderQuery{Status: c.Status, UserID: c.UserID}
	var err error
	for _, t := range []struct {
		flag string
		v    string
		to   *time.Time
	}{
		{"--deadline-after", c.DeadlineAfter, &q.DeadlineAfter},
		{"--deadline-before", c.DeadlineBefore, &q.DeadlineBefore},
		{"--created-after", c.CreatedAfter, &q.CreatedAfter},
		{"--created-before", c.CreatedBefore, &q.CreatedBefore},
	} {
		if *t.to, err = parseTime(t.flag, t.v); err != nil {
			return err
		}
	}
	return list(env, c.listFlags, api.MaxListLimit, orderColumns, func(limit int, after string) ([]api.OrderJSON, string, error) {
		q.Limit, q.After = limit, after
		p, err := env.client.FindOrders(ctx, q)
		return p.Orders, p.Next, err
	})
}

type ordersExtendCmd struct {
	ID          int64         `arg:"" optional:"" help:"The order's id (or give a filter)."`
	Deadline    string        `help:"The new deadline, an RFC 3339 time later than the current one." placeholder:"RFC3339" xor:"extend"`
	By          time.Duration `help:"How much later than the current deadline (e.g. 30m)." xor:"extend"`
	orderFilter `embed:""`
	bulkFlags   `embed:""`
}

// orderFilter are the filter flags that turn orders cancel and extend into
// a bulk action: GET /v1/orders' filters.
type orderFilter struct {
	Status         string `help:"Filter: orders in this status (default: pending_payment)."`
	UserID         string `help:"Filter: this user's orders."`
	DeadlineAfter  string `help:"Filter: orders whose deadline is at or after this RFC 3339 time." placeholder:"RFC3339"`
	DeadlineBefore string `help:"Filter: orders whose deadline is before this RFC 3339 time." placeholder:"RFC3339"`
	CreatedAfter   string `help:"Filter: orders created at or after this RFC 3339 time." placeholder:"RFC3339"`
	CreatedBefore  string `help:"Filter: orders created before this RFC 3339 time." placeholder:"RFC3339"`
}

// filter returns the flags given as the API's filter.
func (o orderFilter) filter() (filter, error) {
	f := filter{}
	f.set("status", o.Status)
	f.set("user_id", o.UserID)
	for _, t := range []struct{ flag, name, v string }{
		{"--deadline-after", "deadline_after", o.DeadlineAfter},
		{"--deadline-before", "deadline_before", o.DeadlineBefore},
		{"--created-after", "created_after", o.CreatedAfter},
		{"--created-before", "created_before", o.CreatedBefore},
	} {
		if err := f.time(t.flag, t.name, t.v); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// target says whether a command acts on the order id or on the filter f:
// exactly one of them.
func target(id int64, f filter) (bulk bool, err error) {
	switch {
	case len(f) > 0 && id != 0:
		return false, usagef("give an order id or a filter, not both")
	case len(f) > 0:
		return true, nil
	case id == 0:
		return false, usagef("give an order id, or a filter (--status, --user-id, --deadline-after, --deadline-before, --created-after, --created-before)")
	}
	return false, nil
}

func (c *ordersExtendCmd) Run(ctx context.Context, env *opsEnv) error {
	var req api.ExtendOrderRequest
	switch {
	case c.Deadline != "" && c.By != 0:
		return usagef("give one of --deadline and --by, not both")
	case c.Deadline != "":
		t, err := parseTime("--deadline", c.Deadline)
		if err != nil {
			return err
		}
		req.Deadline = t.Format(time.RFC3339Nano)
	case c.By > 0:
		if c.By < time.Millisecond {
			return usagef("--by must be at least 1ms, got %s", c.By)
		}
		req.ExtendMs = c.By.Milliseconds()
	case c.By < 0:
		return usagef("--by must be positive, got %s", c.By)
	default:
		return usagef("give one of --deadline and --by")
	}
	f, err := c.filter()
	if err != nil {
		return err
	}
	if bulk, err := target(c.ID, f); err != nil || bulk {
		if err != nil {
			return err
		}
		return runBulk(ctx, env, c.bulkFlags, "orders", api.BulkRequest{Action: "extend_orders", Filter: f,
			Extend: &api.ExtendRequest{Deadline: req.Deadline, ExtendMs: req.ExtendMs}})
	}
	return one(env, orderColumns)(env.client.ExtendOrder(ctx, c.ID, req))
}

type ordersCancelCmd struct {
	ID          int64 `arg:"" optional:"" help:"The order's id (or give a filter)."`
	orderFilter `embed:""`
	bulkFlags   `embed:""`
}

// Run cancels the order ID, or, with a filter flag, every order the
// filter selects as a bulk action (runBulk).
func (c *ordersCancelCmd) Run(ctx context.Context, env *opsEnv) error {
	f, err := c.filter()
	if err != nil {
		return err
	}
	if bulk, err := target(c.ID, f); err != nil || bulk {
		if err != nil {
			return err
		}
		return runBulk(ctx, env, c.bulkFlags, "orders", api.BulkRequest{Action: "cancel_orders", Filter: f})
	}
	return one(env, orderColumns)(env.client.Transition(ctx, c.ID, "cancel"))
}
