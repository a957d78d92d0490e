-- Timers armed in the writer's own transaction (package txtimer): a
-- process that writes this database file INSERTs a request into
-- timer_requests in the transaction that creates its order; hourglass
-- applies each committed request as PUT (or DELETE) /v1/timers/{key} would
-- and deletes it, in one transaction. As on the servers, nothing here may
-- refuse an INSERT: a request hourglass cannot apply moves to
-- timer_request_errors with its reason. Times are TEXT in UTC (SQLite has
-- no timestamp type): fire_at as written ('2026-11-25 10:00:00.000', or
-- any form strftime reads), requested_at by the default below.
CREATE TABLE IF NOT EXISTS timer_requests (
	seq          INTEGER PRIMARY KEY AUTOINCREMENT,
	timer_key    TEXT,
	action       TEXT NOT NULL DEFAULT 'arm',
	fire_at      TEXT,
	delay_ms     INTEGER,
	payload      TEXT,
	webhook_id   INTEGER,
	requested_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))
);

CREATE TABLE IF NOT EXISTS timer_request_errors (
	seq          INTEGER PRIMARY KEY,
	timer_key    TEXT,
	action       TEXT,
	fire_at      TEXT,
	delay_ms     INTEGER,
	payload      TEXT,
	webhook_id   INTEGER,
	requested_at TEXT NOT NULL,
	rejected_at  INTEGER NOT NULL,
	reason       TEXT NOT NULL
);
