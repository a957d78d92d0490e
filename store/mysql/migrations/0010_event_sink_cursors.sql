-- Event sinks (issue #23, package eventsink): how far each sink (its
-- redacted URL, at most 500 characters) has published each partition's
-- events. Every event of the partition (order_id % 64) with seq <= seq is
-- on the sink's bus, so PruneEvents and PruneTimers keep the others; a
-- cursor not touched within the event retention (its sink removed from the
-- configuration) is ignored. At most 64 rows a sink: no index but the key.
CREATE TABLE IF NOT EXISTS event_sink_cursors (
	sink       VARCHAR(500) NOT NULL,
	part       INT NOT NULL,
	seq        BIGINT NOT NULL,
	touched_at BIGINT NOT NULL,
	PRIMARY KEY (sink, part)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
