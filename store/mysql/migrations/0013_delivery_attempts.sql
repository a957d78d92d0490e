-- The attempt log (issue #39, hourglass.AttemptLog): one row per recorded
-- webhook delivery attempt, written in the transaction that records its
-- outcome, so a history shows every attempt of every delivery, the
-- delivered ones too (their webhook_deliveries rows are deleted). order_id
-- is the event's subject (an order's, a timer's or a source row's id), as
-- in events. Pruned by at with the events (--event-retention). InnoDB
-- appends the primary key: each index ends in id.
CREATE TABLE IF NOT EXISTS delivery_attempts (
	id          BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
	order_id    BIGINT NOT NULL,
	delivery_id BIGINT NOT NULL,
	webhook_id  BIGINT NOT NULL,
	event_id    VARCHAR(64) NOT NULL,
	event_type  VARCHAR(64) NOT NULL,
	attempt     INT NOT NULL,
	at          BIGINT NOT NULL,
	duration_ms BIGINT NOT NULL,
	status_code INT NOT NULL,
	outcome     VARCHAR(16) NOT NULL,
	error       VARBINARY(4096) NOT NULL,
	KEY delivery_attempts_order (order_id),
	KEY delivery_attempts_at (at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
