-- One thing's whole story (issue #39). An order.closed's or timer.fired's
-- provenance (hourglass.Closer), written with the event in the close's own
-- transaction: what closed it (cause: deadline, sweeper, recovery,
-- takeover, check_close, check_failed) and on which node. NULL on every
-- other event and on the events written before this migration: unknown.
-- NULL columns added last are instant on MariaDB 10.3+ and MySQL 8.0.12+;
-- the runner treats "duplicate column" and "duplicate key" as applied.
ALTER TABLE events ADD COLUMN cause VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NULL;
ALTER TABLE events ADD COLUMN node VARCHAR(200) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
-- A history reads one subject's (order's, timer's, source row's) events,
-- latest first, from this index (InnoDB appends seq, the primary key): one
-- more index entry per event written.
ALTER TABLE events ADD KEY events_order_seq (order_id);
-- GET /v1/sources/{name}/rows?status=closed pages the source.closed events
-- by seq (InnoDB appends it). InnoDB has no partial index: every event is
-- written to this one too.
ALTER TABLE events ADD KEY events_source_closed (type);
