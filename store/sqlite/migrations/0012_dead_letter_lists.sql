-- Find (issue #39): GET /v1/deadletters filters by webhook and failure
-- time (sqlq's DeadLettersSQL). Partial: only dead deliveries are in them,
-- so a delivery is written to them once, when it dies, and a list never
-- reads past the pending ones of a burst. Dead letters are at most
-- --dead-letter-max (retention), so these stay small. An index ends in
-- the rowid, the id.

-- In id order (no filter, or an event type checked on the way).
CREATE INDEX webhook_deliveries_dead_id ON webhook_deliveries (state) WHERE state = 'dead';
-- ?webhook_id= in id order.
CREATE INDEX webhook_deliveries_dead_webhook ON webhook_deliveries (webhook_id) WHERE state = 'dead';
-- ?failed_after=&failed_before= by (failed_at, id).
CREATE INDEX webhook_deliveries_dead_failed ON webhook_deliveries (failed_at) WHERE state = 'dead';
