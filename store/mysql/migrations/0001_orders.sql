-- Products, orders, idempotency keys, settings. The same data model and
-- units as store/sqlite: times are BIGINT unix milliseconds, items a JSON
-- array of {"sku","quantity"}. MySQL DDL commits by itself, so every
-- statement can run again (IF NOT EXISTS, INSERT IGNORE) and indexes are
-- declared inside CREATE TABLE. SKUs, states and keys are identifiers:
-- binary collations, so "A" and "a" are different SKUs.
CREATE TABLE IF NOT EXISTS products (
	sku       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	name      VARCHAR(256) NOT NULL,
	category  VARCHAR(64) NOT NULL,
	available BIGINT NOT NULL,
	reserved  BIGINT NOT NULL DEFAULT 0,
	sold      BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (sku),
	CONSTRAINT products_stock_not_negative CHECK (available >= 0 AND reserved >= 0 AND sold >= 0)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- The engine's window loader and the sweeper page through
-- orders_status_deadline; the stats read only it.
CREATE TABLE IF NOT EXISTS orders (
	id           BIGINT NOT NULL AUTO_INCREMENT,
	user_id      VARBINARY(128) NOT NULL,
	status       VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	items        TEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	created_at   BIGINT NOT NULL,
	deadline     BIGINT NOT NULL,
	paid_at      BIGINT NULL,
	closed_at    BIGINT NULL,
	close_reason VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NULL,
	payment_id   VARBINARY(128) NULL,
	PRIMARY KEY (id),
	KEY orders_status_deadline (status, deadline)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS idempotency_keys (
	idem_key     VARBINARY(255) NOT NULL,
	request_hash VARBINARY(255) NOT NULL,
	order_id     BIGINT NOT NULL,
	created_at   BIGINT NOT NULL,
	PRIMARY KEY (idem_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS settings (
	name  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	value MEDIUMTEXT NOT NULL,
	PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
