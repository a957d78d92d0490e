-- Reminders (issue #41): an order's order.expiring is due at remind_at
-- (unix ms; NULL when it has none, or once it was sent or skipped), its
-- deadline minus remind_before_ms, the lead it was created with (kept to
-- set remind_at again when the deadline moves). Re-runnable: a column or
-- index that exists already (error 1060, 1061) counts as added.
ALTER TABLE orders ADD COLUMN remind_at BIGINT NULL;
ALTER TABLE orders ADD COLUMN remind_before_ms BIGINT NOT NULL DEFAULT 0;
-- RemindersDue pages through the pending orders' reminders in (remind_at,
-- id) order (InnoDB has no partial index: orders without one sit in it
-- as NULL, before the range read).
ALTER TABLE orders ADD KEY orders_status_remind_at (status, remind_at);
