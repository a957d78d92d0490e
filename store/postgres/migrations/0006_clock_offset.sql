-- Each node publishes, with its heartbeat, the offset it measures of the
-- database's clock from its own (microseconds, positive: the database's
-- is ahead; NULL until it has measured one), so the nodes can compare
-- the clocks of the database servers they reach (cluster.ClockSkewOf). On
-- PostgreSQL every node reaches the one server: the offsets differ only
-- by the nodes' own clocks, and the skew between servers is 0.
ALTER TABLE cluster_nodes ADD COLUMN IF NOT EXISTS clock_offset_us BIGINT;
