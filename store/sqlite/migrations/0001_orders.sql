-- Products, orders, idempotency keys, settings.
CREATE TABLE products (
	sku       TEXT PRIMARY KEY,
	name      TEXT NOT NULL,
	category  TEXT NOT NULL,
	available INTEGER NOT NULL CHECK (available >= 0),
	reserved  INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0),
	sold      INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0)
);
-- Times are unix milliseconds. items is a JSON array of {"sku","quantity"}.
CREATE TABLE orders (
	id           INTEGER PRIMARY KEY,
	user_id      TEXT NOT NULL,
	status       TEXT NOT NULL,
	items        TEXT NOT NULL,
	created_at   INTEGER NOT NULL,
	deadline     INTEGER NOT NULL,
	paid_at      INTEGER,
	closed_at    INTEGER,
	close_reason TEXT,
	payment_id   TEXT
);
-- The engine's window loader and the sweeper page through this index.
CREATE INDEX orders_status_deadline ON orders (status, deadline);
CREATE TABLE idempotency_keys (
	key          TEXT PRIMARY KEY,
	request_hash BLOB NOT NULL,
	order_id     INTEGER NOT NULL,
	created_at   INTEGER NOT NULL
);
CREATE TABLE settings (
	name  TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
