-- Retention (issue #19): what a client grows is pruned along an index,
-- and status-filtered lists read their status's range in page order
-- instead of reading the table in id order and filtering (timers have
-- timers_status_key since 0005). Re-runnable: an index that exists
-- already (error 1061) counts as added.

-- PruneIdempotencyKeys deletes the oldest keys first.
ALTER TABLE idempotency_keys ADD KEY idempotency_keys_created_at (created_at);
-- PruneTimers deletes fired and cancelled timers by their last change.
ALTER TABLE timers ADD KEY timers_status_updated_at (status, updated_at);
-- GET /v1/orders?status= pages by id within one status (InnoDB appends
-- the primary key to a secondary index: this is (status, id)).
ALTER TABLE orders ADD KEY orders_status_id (status);
-- (PruneNodes reads cluster_nodes whole: once gone nodes are pruned it
-- holds a row per live node, and an index on last_seen would cost every
-- heartbeat an index write.)
