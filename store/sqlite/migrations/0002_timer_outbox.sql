-- The timer outbox, for delay mechanisms outside the database.
CREATE TABLE timer_outbox (
	order_id INTEGER PRIMARY KEY,
	deadline INTEGER NOT NULL
);
