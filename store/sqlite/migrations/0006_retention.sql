-- Retention (issue #19): what a client grows is pruned along an index,
-- and status-filtered lists read their status's range in page order
-- instead of reading the table in id or key order and filtering.
-- PruneIdempotencyKeys deletes the oldest keys first.
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);
-- PruneTimers deletes fired and cancelled timers by their last change.
-- Partial: scheduled timers, the ones re-armed, are not in it.
CREATE INDEX timers_done_updated_at ON timers (updated_at) WHERE status <> 'scheduled';
-- GET /v1/timers?status= pages by key within one status.
CREATE INDEX timers_status_key ON timers (status, key);
-- GET /v1/orders?status= pages by id within one status.
CREATE INDEX orders_status_id ON orders (status, id);
