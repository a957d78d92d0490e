-- Named timers (hourglass.TimerStore, issue #12). A timer's id starts at
-- hourglass.TimerIDBase (2^62, the table's first AUTO_INCREMENT value), so
-- timer ids share with order ids, unchanged, every column that carries "the
-- id of what is due": timer_outbox.order_id, events.order_id,
-- webhook_deliveries.order_id and order_feed's body. On Galera,
-- auto_increment_increment and _offset only step ids upwards from the
-- counter, so they stay at or above the base. Times are BIGINT unix
-- milliseconds, as in every other table.
--
-- timer_key is bytewise (VARBINARY): keys compare and sort as bytes.
-- payload and request_hash are bytes stored exactly as given: a JSON payload
-- may hold bytes that are not UTF-8 (encoding/json accepts them), which a
-- strict-mode TEXT column would refuse. webhook_id has no foreign key (see
-- 0003): a deleted webhook leaves it dangling, and the fire delivers to
-- nobody. timers_status_fire_at serves TimersDue and TimerCounts;
-- timers_status_key serves Timers filtered by status.
CREATE TABLE IF NOT EXISTS timers (
	id           BIGINT NOT NULL AUTO_INCREMENT,
	timer_key    VARBINARY(200) NOT NULL,
	status       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	fire_at      BIGINT NOT NULL,
	fired_at     BIGINT NULL,
	payload      MEDIUMBLOB NULL,
	webhook_id   BIGINT NULL,
	request_hash VARBINARY(255) NOT NULL,
	created_at   BIGINT NOT NULL,
	updated_at   BIGINT NOT NULL,
	PRIMARY KEY (id),
	UNIQUE KEY timers_key (timer_key),
	KEY timers_status_fire_at (status, fire_at, id),
	KEY timers_status_key (status, timer_key),
	CONSTRAINT timers_status CHECK (status IN ('scheduled', 'fired', 'cancelled'))
) ENGINE = InnoDB AUTO_INCREMENT = 4611686018427387904 DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The body of a timer.fired event (hourglass.MarshalTimerEvent, written at
-- the fire: a re-arm later changes the timer, not the event); NULL for an
-- order's events, whose body is rendered from the order's row. Bytes, for
-- the payload's sake (above). Adding a NULL column last is instant on
-- MariaDB 10.3+ and MySQL 8.0.12+. MySQL has no ADD COLUMN IF NOT EXISTS:
-- the migration runner treats "duplicate column" as already applied.
ALTER TABLE events ADD COLUMN body MEDIUMBLOB NULL;
