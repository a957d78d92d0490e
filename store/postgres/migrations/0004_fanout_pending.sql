-- Close batches whose events' webhook deliveries are still to be created.
-- In a burst (more closes queued behind it) a close batch writes its
-- order.closed events and one row here listing their seqs instead of their
-- deliveries, so the close transactions stay short; a background statement
-- (any process's) creates the deliveries once no close is queued and
-- deletes the row in the same transaction. Sequence values are not in commit
-- order, so a row lists its events rather than a range.
CREATE TABLE fanout_pending (
	id   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	seqs BIGINT[] NOT NULL
);
