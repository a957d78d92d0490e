-- A webhook's event types keep the order they were given in a column, as
-- on the server stores, instead of in the rowids one INSERT's rows take.
-- The rows already written keep that order: their rowids.
ALTER TABLE webhook_subscriptions ADD COLUMN position INTEGER NOT NULL DEFAULT 0;
UPDATE webhook_subscriptions SET position = rowid;
