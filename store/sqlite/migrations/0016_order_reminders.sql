-- Reminders (issue #41): an order's order.expiring is due at remind_at
-- (unix ms; NULL when it has none, or once it was sent or skipped), its
-- deadline minus remind_before_ms, the lead it was created with (kept to
-- set remind_at again when the deadline moves).
ALTER TABLE orders ADD COLUMN remind_at INTEGER;
ALTER TABLE orders ADD COLUMN remind_before_ms INTEGER NOT NULL DEFAULT 0;
-- RemindersDue pages through the pending orders' reminders in (remind_at,
-- id) order; only orders with a reminder to send are in it.
CREATE INDEX orders_status_remind_at ON orders (status, remind_at, id) WHERE remind_at IS NOT NULL;
