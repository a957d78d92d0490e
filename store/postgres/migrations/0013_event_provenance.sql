-- One thing's whole story (issue #39). An order.closed's or timer.fired's
-- provenance (hourglass.Closer), written with the event in the close's own
-- transaction: what closed it (cause: deadline, sweeper, recovery,
-- takeover, check_close, check_failed) and on which node. NULL on every
-- other event and on the events written before this migration: unknown.
-- Adding a NULL column is a catalog change only.
ALTER TABLE events ADD COLUMN IF NOT EXISTS cause TEXT;
ALTER TABLE events ADD COLUMN IF NOT EXISTS node TEXT;
-- A history reads one subject's (order's, timer's, source row's) events,
-- latest first, from this index: one more index entry per event written.
CREATE INDEX IF NOT EXISTS events_order_seq ON events (order_id, seq);
-- GET /v1/sources/{name}/rows?status=closed pages the source.closed events
-- by seq: partial, so only those events are written to it.
CREATE INDEX IF NOT EXISTS events_source_closed ON events (seq) WHERE type = 'source.closed';
