-- Timers armed in the shop's own transaction (issue #21, package txtimer):
-- the shop INSERTs a request into timer_requests in the transaction that
-- creates its order, reaching this database by qualified name from its own
-- (INSERT INTO hourglass.timer_requests …: an InnoDB transaction spans the
-- databases of one server); hourglass applies each committed request as PUT
-- (or DELETE) /v1/timers/{key} would and deletes it, in one transaction
-- (requests.go). The columns are a contract (docs/timers.md): a shop's code
-- writes them by name.
--
-- Nothing here may refuse a shop's INSERT under strict mode: a request
-- hourglass cannot apply moves to timer_request_errors with its reason
-- instead. So the text columns are utf8mb4 (the shop's connection converts
-- whatever its character set is; a valid key or action is ASCII) and wide:
-- timer_key is TEXT (a valid key has at most 200 characters, but a longer
-- one must reach the error list, not fail the shop's transaction), action
-- VARCHAR(1024), payload MEDIUMTEXT (a JSON object of at most 64 KiB when
-- valid). utf8mb4_bin: keys are case-sensitive, compared as their bytes.
-- fire_at and requested_at are DATETIME(3) in UTC: requested_at defaults to
-- UTC_TIMESTAMP(3), the server's clock in UTC whatever the shop's session
-- time_zone, and a shop writes fire_at in UTC (txtimer does). No index but
-- the primary key: the applier reads the oldest requests by seq.
CREATE TABLE IF NOT EXISTS timer_requests (
	seq          BIGINT NOT NULL AUTO_INCREMENT,
	timer_key    TEXT NULL,
	action       VARCHAR(1024) NOT NULL DEFAULT 'arm',
	fire_at      DATETIME(3) NULL,
	delay_ms     BIGINT NULL,
	payload      MEDIUMTEXT NULL,
	webhook_id   BIGINT NULL,
	requested_at DATETIME(3) NOT NULL DEFAULT (UTC_TIMESTAMP(3)),
	PRIMARY KEY (seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The requests hourglass could not apply, as the shop wrote them, with the
-- reason and when (UTC); the API lists them by seq (GET
-- /v1/timer-requests/rejected).
CREATE TABLE IF NOT EXISTS timer_request_errors (
	seq          BIGINT NOT NULL,
	timer_key    TEXT NULL,
	action       VARCHAR(1024) NULL,
	fire_at      DATETIME(3) NULL,
	delay_ms     BIGINT NULL,
	payload      MEDIUMTEXT NULL,
	webhook_id   BIGINT NULL,
	requested_at DATETIME(3) NOT NULL,
	rejected_at  DATETIME(3) NOT NULL,
	reason       TEXT NOT NULL,
	PRIMARY KEY (seq)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
