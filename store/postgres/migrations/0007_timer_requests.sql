-- Timers armed in the shop's own transaction (package txtimer): the shop
-- INSERTs a request into timer_requests in the transaction that creates its
-- order; hourglass applies each committed request as PUT (or DELETE)
-- /v1/timers/{key} would and deletes it, in one transaction. The columns
-- are a contract (docs/timers.md): a shop's code writes them by name.
-- Nothing here may refuse a shop's INSERT: a request hourglass cannot apply
-- moves to timer_request_errors with its reason instead.
CREATE TABLE IF NOT EXISTS timer_requests (
	seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	timer_key    TEXT,
	action       TEXT NOT NULL DEFAULT 'arm',
	fire_at      TIMESTAMPTZ(3),
	delay_ms     BIGINT,
	payload      TEXT,
	webhook_id   BIGINT,
	requested_at TIMESTAMPTZ(3) NOT NULL DEFAULT statement_timestamp()
);

-- The requests hourglass could not apply, with the reason; the API lists
-- them (GET /v1/timer-requests/rejected) and the pruner bounds them.
CREATE TABLE IF NOT EXISTS timer_request_errors (
	seq          BIGINT PRIMARY KEY,
	timer_key    TEXT,
	action       TEXT,
	fire_at      TIMESTAMPTZ(3),
	delay_ms     BIGINT,
	payload      TEXT,
	webhook_id   BIGINT,
	requested_at TIMESTAMPTZ(3) NOT NULL,
	rejected_at  TIMESTAMPTZ(3) NOT NULL,
	reason       TEXT NOT NULL
);

-- A committed request wakes the appliers at once: NOTIFY is sent at
-- commit, never for a transaction rolled back. The channel names the
-- database and the table's schema (hashed, to fit in 63 bytes), so that two
-- hourglass schemas of one database do not wake each other.
CREATE OR REPLACE FUNCTION timer_requests_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('hourglass_timer_requests_' || md5(current_database() || '.' || TG_TABLE_SCHEMA), '');
	RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS timer_requests_notify ON timer_requests;
CREATE TRIGGER timer_requests_notify AFTER INSERT ON timer_requests
	FOR EACH STATEMENT EXECUTE FUNCTION timer_requests_notify();
