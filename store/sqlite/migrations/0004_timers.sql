-- Clients' named timers (issue #12). Ids start at 2^62
-- (hourglass.TimerIDBase), far above any order id, so a timer's id shares
-- with order ids the columns that carry "what is due": timer_outbox's,
-- events' and webhook_deliveries' order_id. The single writer assigns
-- id = max(id) + 1, at least 2^62, in the insert; timers are never deleted.
-- Times are unix milliseconds; fired_at is NULL unless fired. payload is
-- the JSON object as given, or NULL. webhook_id NULL: every webhook
-- subscribed to timer.fired; else only that one (none once it is deleted,
-- hence no foreign key). request_hash: re-arming a scheduled timer with the
-- same hash changes nothing.
CREATE TABLE timers (
	id           INTEGER PRIMARY KEY,
	key          TEXT NOT NULL UNIQUE,
	status       TEXT NOT NULL CHECK (status IN ('scheduled', 'fired', 'cancelled')),
	fire_at      INTEGER NOT NULL,
	fired_at     INTEGER,
	payload      TEXT,
	webhook_id   INTEGER,
	request_hash BLOB NOT NULL,
	created_at   INTEGER NOT NULL,
	updated_at   INTEGER NOT NULL
);
-- TimersDue pages through this index, TimerCounts counts along it.
CREATE INDEX timers_status_fire_at ON timers (status, fire_at, id);
-- The JSON body of an event whose subject is not an order (timer.fired),
-- written with the event: its timer may be re-armed since. NULL for order
-- events, which are rendered from the order as of the event (see 0003).
ALTER TABLE events ADD COLUMN body TEXT;
