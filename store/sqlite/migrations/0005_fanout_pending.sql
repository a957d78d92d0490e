-- Close batches whose events' webhook deliveries are still to be created.
-- In a burst (more closes queued behind it) a close batch writes its events
-- and one row here instead of its deliveries, so the close transactions
-- stay short; a background write creates the deliveries once no close is
-- queued, and deletes the row in the same transaction. Each row is a seq
-- range of events of one type, all written by one close batch.
CREATE TABLE fanout_pending (
	first_seq INTEGER PRIMARY KEY,
	last_seq  INTEGER NOT NULL,
	type      TEXT NOT NULL
);
