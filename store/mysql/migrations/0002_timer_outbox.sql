-- The timer outbox, for delay mechanisms outside the database.
CREATE TABLE IF NOT EXISTS timer_outbox (
	order_id BIGINT NOT NULL,
	deadline BIGINT NOT NULL,
	PRIMARY KEY (order_id)
) ENGINE = InnoDB;
