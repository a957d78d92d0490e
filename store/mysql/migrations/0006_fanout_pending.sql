-- Close batches whose events' webhook deliveries are still to be created.
-- In a burst (more closes queued behind it) a close batch writes its
-- order.closed events and one row here listing their seqs (comma-separated)
-- instead of their deliveries, so the close transactions stay short; a
-- background transaction (any process's) creates the deliveries once no
-- close is queued and deletes the row in the same transaction.
CREATE TABLE IF NOT EXISTS fanout_pending (
	id   BIGINT NOT NULL AUTO_INCREMENT,
	seqs MEDIUMTEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	PRIMARY KEY (id)
) ENGINE = InnoDB;
