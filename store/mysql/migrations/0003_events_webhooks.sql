-- The event outbox, webhooks and their delivery queue, as in store/sqlite.
-- InnoDB persists AUTO_INCREMENT counters (MySQL 8.0, MariaDB 10.2.4+), so
-- the id of a deleted webhook or dead letter is never handed out again. No
-- foreign keys: their checks would take shared locks on the hot rows of
-- every write; deletes remove children explicitly.
--
-- One row per committed state change; the order snapshot is not copied
-- (hourglass.Order.AsOf renders it from the current row).
CREATE TABLE IF NOT EXISTS events (
	seq        BIGINT NOT NULL AUTO_INCREMENT,
	id         VARCHAR(40) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	type       VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	order_id   BIGINT NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (seq),
	KEY events_created_at (created_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS webhooks (
	id         BIGINT NOT NULL AUTO_INCREMENT,
	url        VARCHAR(2048) NOT NULL,
	secret     VARCHAR(256) NOT NULL,
	created_at BIGINT NOT NULL,
	PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The event types a webhook receives; '*' for all. Fan-out seeks the
-- primary key by type; listing reads webhook_subscriptions_webhook in the
-- order the types were given.
CREATE TABLE IF NOT EXISTS webhook_subscriptions (
	webhook_id BIGINT NOT NULL,
	type       VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	position   INT NOT NULL,
	PRIMARY KEY (type, webhook_id),
	KEY webhook_subscriptions_webhook (webhook_id, position)
) ENGINE = InnoDB;

-- One row per (event, webhook) until it is delivered (then deleted).
-- state 'pending': due at next_attempt_at; 'dead': a dead letter.
CREATE TABLE IF NOT EXISTS webhook_deliveries (
	id              BIGINT NOT NULL AUTO_INCREMENT,
	webhook_id      BIGINT NOT NULL,
	event_seq       BIGINT NOT NULL,
	order_id        BIGINT NOT NULL,
	state           VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	attempts        INT NOT NULL DEFAULT 0,
	next_attempt_at BIGINT NOT NULL,
	last_error      BLOB NULL,
	failed_at       BIGINT NULL,
	PRIMARY KEY (id),
	KEY webhook_deliveries_due (state, next_attempt_at, id),
	-- Per-order ordering: the earliest pending delivery of a (webhook, order) goes first.
	KEY webhook_deliveries_stream (webhook_id, order_id, event_seq),
	KEY webhook_deliveries_event (event_seq),
	CONSTRAINT webhook_deliveries_state CHECK (state IN ('pending', 'dead'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The row CreateWebhook locks (FOR UPDATE) before it counts webhooks, so a
-- limit holds whatever the concurrency.
INSERT IGNORE INTO settings (name, value) VALUES ('webhooks', '');
