-- The event outbox, webhooks and their delivery queue. Webhook and delivery
-- ids are AUTOINCREMENT so an id is never reused after a delete: a client
-- holding a dead letter's or webhook's id can never act on another one. An
-- event's seq may be reused only after the highest one was pruned, which
-- happens only to events no delivery refers to, so seq still orders the
-- events deliveries refer to.
-- One row per committed state change. The order snapshot is not copied:
-- every order field is written once and then fixed, so the order as it was
-- right after the change is the current row seen as of the event's type
-- (hourglass.Order.AsOf), which keeps this hot insert small.
CREATE TABLE events (
	seq        INTEGER PRIMARY KEY,
	id         TEXT NOT NULL,
	type       TEXT NOT NULL,
	order_id   INTEGER NOT NULL,
	created_at INTEGER NOT NULL
);
CREATE INDEX events_created_at ON events (created_at);
CREATE TABLE webhooks (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	url        TEXT NOT NULL,
	secret     TEXT NOT NULL,
	created_at INTEGER NOT NULL
);
-- The event types a webhook receives; '*' for all. Fan-out joins on type.
CREATE TABLE webhook_subscriptions (
	webhook_id INTEGER NOT NULL REFERENCES webhooks (id),
	type       TEXT NOT NULL,
	PRIMARY KEY (type, webhook_id)
);
-- One row per (event, webhook) until it is delivered (then deleted).
-- state 'pending': due at next_attempt_at; 'dead': a dead letter.
CREATE TABLE webhook_deliveries (
	id              INTEGER PRIMARY KEY AUTOINCREMENT,
	webhook_id      INTEGER NOT NULL REFERENCES webhooks (id),
	event_seq       INTEGER NOT NULL REFERENCES events (seq),
	order_id        INTEGER NOT NULL,
	state           TEXT NOT NULL CHECK (state IN ('pending', 'dead')),
	attempts        INTEGER NOT NULL DEFAULT 0,
	next_attempt_at INTEGER NOT NULL,
	last_error      TEXT,
	failed_at       INTEGER
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at, id);
-- Per-order ordering: the earliest pending delivery of a (webhook, order) goes first.
CREATE INDEX webhook_deliveries_stream ON webhook_deliveries (webhook_id, order_id, event_seq);
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_seq);
