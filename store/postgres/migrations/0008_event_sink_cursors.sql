-- Event sinks (issue #23, package eventsink): how far each sink (its
-- redacted URL) has published each partition's events. Every event of the
-- partition (order_id % 64) with seq <= seq is on the sink's bus, so
-- PruneEvents and PruneTimers keep the others; a cursor not touched within
-- the event retention (its sink removed from the configuration) is
-- ignored. At most 64 rows a sink: no index but the key.
CREATE TABLE IF NOT EXISTS event_sink_cursors (
	sink       TEXT NOT NULL,
	part       INTEGER NOT NULL,
	seq        BIGINT NOT NULL,
	touched_at BIGINT NOT NULL,
	PRIMARY KEY (sink, part)
);
