-- The attempt log (issue #39, hourglass.AttemptLog): one row per recorded
-- webhook delivery attempt, written in the transaction that records its
-- outcome, so a history shows every attempt of every delivery, the
-- delivered ones too (their webhook_deliveries rows are deleted). order_id
-- is the event's subject (an order's, a timer's or a source row's id), as
-- in events. Pruned by at with the events (--event-retention).
CREATE TABLE IF NOT EXISTS delivery_attempts (
	id          INTEGER PRIMARY KEY,
	order_id    INTEGER NOT NULL,
	delivery_id INTEGER NOT NULL,
	webhook_id  INTEGER NOT NULL,
	event_id    TEXT NOT NULL,
	event_type  TEXT NOT NULL,
	attempt     INTEGER NOT NULL,
	at          INTEGER NOT NULL,
	duration_ms INTEGER NOT NULL,
	status_code INTEGER NOT NULL,
	outcome     TEXT NOT NULL,
	error       TEXT NOT NULL
);
-- A subject's attempts in the order they were recorded.
CREATE INDEX IF NOT EXISTS delivery_attempts_order ON delivery_attempts (order_id);
-- Retention: the oldest first.
CREATE INDEX IF NOT EXISTS delivery_attempts_at ON delivery_attempts (at);
