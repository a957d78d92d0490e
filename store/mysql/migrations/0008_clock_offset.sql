-- Each node publishes, with its heartbeat, the offset it measures of its
-- database server's clock from its own (microseconds, positive: the
-- database's is ahead; NULL until it has measured one), and which server
-- its heartbeat reached (@@hostname:@@port), so the nodes can compare the
-- clocks of the servers they reach (cluster.ClockSkewOf): on Galera each
-- node's NOW(3) times the deadlines and leases its transactions write,
-- which the others compare with their own. Re-runnable: a column that
-- exists already (error 1060) counts as added.
ALTER TABLE cluster_nodes ADD COLUMN clock_offset_us BIGINT NULL;
ALTER TABLE cluster_nodes ADD COLUMN db_node VARCHAR(255) NOT NULL DEFAULT '';
