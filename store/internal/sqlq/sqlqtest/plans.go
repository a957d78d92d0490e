// Package sqlqtest is what the stores' tests of package sqlq's reads share:
// the filters their plan tests explain, the rows they fill, the list
// benchmarks.
package sqlqtest

import (
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// OrderListPlan is one ListOrders filter the stores' plan tests explain
// (EXPLAIN, EXPLAIN QUERY PLAN), with the index its statement must read a
// range of.
type OrderListPlan struct {
	Name   string
	Filter hourglass.OrderFilter
	Index  string
	// Alt is another index a planner that chooses (PostgreSQL's) may read
	// instead, as well: for two ranges, either one's.
	Alt string
}

// OrderListPlans are the filters and combinations users run on GET
// /v1/orders, over a table of n orders (n a multiple of 100) filled as
// each store's plan test fills it: order g (1..n) of user "u" || (g %
// (n/5)) (five orders a user), status by g % 200 (0 pending_payment, 1
// paid, 2 closed, 3 cancelled, 4 shipped, else completed: a shop's orders
// are mostly done, and a planner reads a frequent status's rows in id
// order filtered, as cheap for a page), created at g*1000 ms and due
// 600,000 + (g % 13)*1000 ms later. Ranges are 1 % of the table. Now is
// half-way, so pending orders in both halves read differently.
func OrderListPlans(n int) []OrderListPlan {
	mid, width := n/2*1000, n/100*1000
	tm := func(ms int) time.Time { return hourglass.FromUnixMilli(int64(ms)) }
	now := tm(mid + 600000)
	user := "u" + strconv.Itoa(7)
	type f = hourglass.OrderFilter
	const (
		byID       = "orders_status_id"
		byDeadline = "orders_status_deadline"
		byCreated  = "orders_status_created"
		byUser     = "orders_user_id"
	)
	out := []OrderListPlan{
		{"status paid", f{Status: hourglass.StatePaid}, byID, ""},
		{"status closed", f{Status: hourglass.StateClosed}, byID, ""},
		{"user", f{UserID: user}, byUser, ""},
		{"user and status", f{UserID: user, Status: hourglass.StatePaid}, byUser, ""},
		{"user and status closed", f{UserID: user, Status: hourglass.StateClosed}, byUser, ""},
		{"deadline range", f{DeadlineFrom: tm(mid), DeadlineBefore: tm(mid + width)}, byDeadline, ""},
		{"deadline from", f{DeadlineFrom: tm(mid)}, byDeadline, ""},
		{"deadline before", f{DeadlineBefore: tm(mid)}, byDeadline, ""},
		{"deadline and status pending", f{Status: hourglass.StatePendingPayment, DeadlineFrom: tm(mid + 600000), DeadlineBefore: tm(mid + 600000 + width)}, byDeadline, ""},
		{"deadline and status closed", f{Status: hourglass.StateClosed, DeadlineBefore: tm(mid)}, byDeadline, ""},
		{"deadline and status paid", f{Status: hourglass.StatePaid, DeadlineFrom: tm(mid)}, byDeadline, ""},
		{"created range", f{CreatedFrom: tm(mid), CreatedBefore: tm(mid + width)}, byCreated, ""},
		{"created from", f{CreatedFrom: tm(mid)}, byCreated, ""},
		{"created and status paid", f{Status: hourglass.StatePaid, CreatedFrom: tm(mid), CreatedBefore: tm(mid + width)}, byCreated, ""},
		{"created and status closed", f{Status: hourglass.StateClosed, CreatedBefore: tm(mid)}, byCreated, ""},
		// Both ranges: the narrower one is read.
		{"deadline and created", f{DeadlineFrom: tm(mid), CreatedFrom: tm(mid - width), CreatedBefore: tm(mid)}, byCreated, byDeadline},
		{"deadline and created, deadline narrower", f{DeadlineFrom: tm(mid), DeadlineBefore: tm(mid + width), CreatedFrom: tm(1000)}, byDeadline, byCreated},
		{"user and deadline", f{UserID: user, DeadlineFrom: tm(mid)}, byUser, ""},
		{"user and created", f{UserID: user, CreatedBefore: tm(mid)}, byUser, ""},
		{"user, status and created", f{UserID: user, Status: hourglass.StateCompleted, CreatedFrom: tm(1000)}, byUser, ""},
		// Later pages: the cursor is part of the range.
		{"deadline range, a later page", f{DeadlineFrom: tm(mid), DeadlineBefore: tm(mid + width), After: int64(n/2 - 590), AfterAt: tm(mid + 1000)}, byDeadline, ""},
		{"created and status, a later page", f{Status: hourglass.StatePaid, CreatedFrom: tm(mid), After: int64(n/2 + 1), AfterAt: tm(mid + 1000)}, byCreated, ""},
		{"status, a later page", f{Status: hourglass.StatePaid, After: int64(n / 2)}, byID, ""},
	}
	for i := range out {
		out[i].Filter.Now, out[i].Filter.Limit = now, 50
	}
	return out
}

// FillOrdersSQL is the statement that fills orders as OrderListPlans
// describes, for the plan tests and the list benchmarks: numbers is a FROM
// item whose column g counts 1..n, concat the store's concatenation of two
// SQL expressions. The orders' items are an empty list: nothing reserved.
func FillOrdersSQL(n int, numbers string, concat func(a, b string) string) string {
	return `INSERT INTO orders (user_id, status, items, created_at, deadline, closed_at, close_reason)
SELECT ` + concat(`'u'`, `CAST(g % `+strconv.Itoa(max(n/5, 1))+` AS CHAR(20))`) + `,
	CASE g % 200 WHEN 0 THEN 'pending_payment' WHEN 1 THEN 'paid' WHEN 2 THEN 'closed' WHEN 3 THEN 'cancelled' WHEN 4 THEN 'shipped' ELSE 'completed' END,
	'[]', g * 1000, g * 1000 + 600000 + (g % 13) * 1000,
	CASE WHEN g % 200 = 2 THEN g * 1000 + 600000 END, CASE WHEN g % 200 = 2 THEN 'timeout' END
FROM ` + numbers
}

// TimerListPlan is one Timers filter the stores' plan tests explain, with
// the index its statement must read a range of.
type TimerListPlan struct {
	Name   string
	Filter hourglass.TimerFilter
	Index  string
	// Key names the unique index of the key: a list by key without a
	// status reads it (its name differs per store).
	Key bool
	// Alt is another index a planner that chooses may read instead.
	Alt string
}

// TimerListPlans are the filters and combinations users run on GET
// /v1/timers, over a table of n timers (n a multiple of 100) filled as
// each store's plan test fills it (FillTimersSQL): timer g (1..n) keyed
// "c" || (g % 100) || ":" || g (a hundred prefixes), fire_at g*1000 ms,
// status by g % 200 (0 scheduled, 1 cancelled, else fired).
func TimerListPlans(n int) []TimerListPlan {
	mid, width := n/2*1000, n/100*1000
	tm := func(ms int) time.Time { return hourglass.FromUnixMilli(int64(ms)) }
	type f = hourglass.TimerFilter
	const (
		byKey  = "timers_status_key"
		byFire = "timers_status_fire_at"
	)
	out := []TimerListPlan{
		{"status", f{Status: hourglass.TimerScheduled}, byKey, false, ""},
		{"prefix", f{Prefix: "c7:"}, "", true, ""},
		{"prefix and status", f{Prefix: "c7:", Status: hourglass.TimerCancelled}, byKey, false, ""},
		{"fire range", f{FireFrom: tm(mid), FireBefore: tm(mid + width)}, byFire, false, ""},
		{"fire from", f{FireFrom: tm(mid)}, byFire, false, ""},
		{"fire before and status", f{FireBefore: tm(mid), Status: hourglass.TimerScheduled}, byFire, false, ""},
		{"fire range and prefix", f{FireFrom: tm(mid), FireBefore: tm(mid + width), Prefix: "c7:"}, byFire, false, byKey},
		{"fire from and prefix", f{FireFrom: tm(mid), Prefix: "c7:"}, byKey, false, ""},
		{"fire from, prefix and status", f{FireFrom: tm(mid), Prefix: "c7:", Status: hourglass.TimerScheduled}, byKey, false, ""},
		{"prefix, a later page", f{Prefix: "c7:", After: "c7:" + strconv.Itoa(n/2+7)}, "", true, ""},
		{"fire range, a later page", f{FireFrom: tm(mid), FireBefore: tm(mid + width), AfterFireAt: tm(mid + 1000), AfterID: hourglass.TimerIDBase + int64(n/2+1)}, byFire, false, ""},
	}
	for i := range out {
		out[i].Filter.Limit = 50
	}
	return out
}

// FillTimersSQL is the statement that fills timers as TimerListPlans
// describes: numbers and concat as for FillOrdersSQL, key the timers' key
// column, hash a literal of the request hash column's type.
func FillTimersSQL(numbers, key, hash string, concat func(a, b string) string) string {
	return `INSERT INTO timers (id, ` + key + `, status, fire_at, fired_at, request_hash, created_at, updated_at)
SELECT ` + strconv.FormatInt(hourglass.TimerIDBase, 10) + ` + g, ` + concat(concat(concat(`'c'`, `CAST(g % 100 AS CHAR(20))`), `':'`), `CAST(g AS CHAR(20))`) + `,
	CASE g % 200 WHEN 0 THEN 'scheduled' WHEN 1 THEN 'cancelled' ELSE 'fired' END,
	g * 1000, CASE WHEN g % 200 > 1 THEN g * 1000 END, ` + hash + `, g * 1000, g * 1000
FROM ` + numbers
}

// DeadLetterListPlan is one DeadLetters filter the stores' plan tests
// explain, with the index of webhook_deliveries its statement must read a
// range of (Alt: another a planner that chooses may read instead).
type DeadLetterListPlan struct {
	Name   string
	Filter hourglass.DeadLetterFilter
	Index  string
	Alt    string
}

// DeadLetterListPlans are the filters and combinations users run on GET
// /v1/deadletters, over n deliveries (n a multiple of 100) filled by
// FillDeadLettersSQL: delivery g (1..n) of event g (type by g % 7 of
// hourglass.EventTypes) to webhook 1 (a receiver that was down), but one
// in a thousand to webhooks 2..10; one in ten dead (g % 10 = 0), failed at
// g*1000 ms, the others pending (a burst's backlog).
func DeadLetterListPlans(n int) []DeadLetterListPlan {
	mid, width := n/2*1000, n/100*1000
	tm := func(ms int) time.Time { return hourglass.FromUnixMilli(int64(ms)) }
	type f = hourglass.DeadLetterFilter
	const (
		byID      = "webhook_deliveries_dead_id"
		byWebhook = "webhook_deliveries_dead_webhook"
		byFailed  = "webhook_deliveries_dead_failed"
	)
	out := []DeadLetterListPlan{
		{"every dead letter", f{}, byID, ""},
		{"webhook", f{WebhookID: 3}, byWebhook, ""},
		{"event type", f{EventType: hourglass.EventOrderPaid}, byID, ""},
		{"webhook and event type", f{WebhookID: 3, EventType: hourglass.EventOrderPaid}, byWebhook, ""},
		{"failed range", f{FailedFrom: tm(mid), FailedBefore: tm(mid + width)}, byFailed, ""},
		{"failed from", f{FailedFrom: tm(mid)}, byFailed, ""},
		{"failed range and webhook", f{FailedFrom: tm(mid), FailedBefore: tm(mid + width), WebhookID: 3}, byFailed, byWebhook},
		{"failed before and webhook", f{FailedBefore: tm(mid), WebhookID: 3}, byWebhook, ""},
		{"failed range and event type", f{FailedFrom: tm(mid), FailedBefore: tm(mid + width), EventType: hourglass.EventOrderPaid}, byFailed, ""},
		{"webhook, a later page", f{WebhookID: 3, After: int64(n / 2)}, byWebhook, ""},
		{"failed range, a later page", f{FailedFrom: tm(mid), FailedBefore: tm(mid + width), After: int64(n/2 + 10), AfterFailedAt: tm(mid + 10000)}, byFailed, ""},
	}
	for i := range out {
		out[i].Filter.Limit = 50
	}
	return out
}

// FillDeadLettersSQL are the statements that fill webhooks, events and
// webhook_deliveries as DeadLetterListPlans describes, on a new database
// (the events' seqs and the webhooks' ids count from 1): numbers(k) is a
// FROM item whose column g counts 1..k, concat as for FillOrdersSQL.
func FillDeadLettersSQL(n int, numbers func(k int) string, concat func(a, b string) string) []string {
	var typ strings.Builder
	typ.WriteString(`CASE g % 7`)
	for i, t := range hourglass.EventTypes()[:7] {
		typ.WriteString(` WHEN ` + strconv.Itoa(i) + ` THEN '` + string(t) + `'`)
	}
	typ.WriteString(` END`)
	return []string{
		`INSERT INTO webhooks (url, secret, created_at) SELECT ` + concat(`'https://hooks.example.com/'`, `CAST(g AS CHAR(20))`) + `, 's', 0 FROM ` + numbers(10),
		`INSERT INTO events (id, type, order_id, created_at) SELECT ` + concat(`'evt_'`, `CAST(g AS CHAR(20))`) + `, ` + typ.String() + `, g, g * 1000 FROM ` + numbers(n),
		`INSERT INTO webhook_deliveries (webhook_id, event_seq, order_id, state, attempts, next_attempt_at, last_error, failed_at)
SELECT CASE WHEN g % 1000 = 0 THEN 2 + ((g - g % 1000) / 1000) % 9 ELSE 1 END, g, g, CASE WHEN g % 10 = 0 THEN 'dead' ELSE 'pending' END, 1, g * 1000,
	CASE WHEN g % 10 = 0 THEN 'HTTP 503' END, CASE WHEN g % 10 = 0 THEN g * 1000 END
FROM ` + numbers(n),
	}
}
