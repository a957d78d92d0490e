-- Find (issue #39): GET /v1/deadletters filters by webhook and failure
-- time (sqlq's DeadLettersSQL). InnoDB has no partial index: these lead
-- with state, so a list reads only dead deliveries, but every delivery is
-- written to them (three more entries a delivery). InnoDB appends the
-- primary key: each ends in id. Re-runnable: an index that exists already
-- (error 1061) counts as added.

-- In id order (no filter, or an event type checked on the way).
ALTER TABLE webhook_deliveries ADD KEY webhook_deliveries_dead_id (state);
-- ?webhook_id= in id order.
ALTER TABLE webhook_deliveries ADD KEY webhook_deliveries_dead_webhook (state, webhook_id);
-- ?failed_after=&failed_before= by (failed_at, id).
ALTER TABLE webhook_deliveries ADD KEY webhook_deliveries_dead_failed (state, failed_at);
