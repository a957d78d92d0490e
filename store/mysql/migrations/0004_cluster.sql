-- The cluster (hourglass.ClusterStore): the nodes sharing this database and
-- the lease of each of the hourglass.Partitions (64) partitions, timed by the
-- database server's clock (unix milliseconds), and the feed through which a
-- process learns of the orders the others create (MySQL has no LISTEN/NOTIFY).

-- One row per process, refreshed by its heartbeat; deleted when it leaves.
CREATE TABLE IF NOT EXISTS cluster_nodes (
	id         VARCHAR(200) NOT NULL,
	addr       VARCHAR(255) NOT NULL,
	started_at BIGINT NOT NULL,
	last_seen  BIGINT NOT NULL,
	PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row per partition, always: owner '' is free; epoch grows by one each
-- time the partition changes owner and is kept when it is released.
CREATE TABLE IF NOT EXISTS cluster_leases (
	part       INT NOT NULL,
	owner      VARCHAR(200) NOT NULL DEFAULT '',
	epoch      BIGINT NOT NULL DEFAULT 0,
	expires_at BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (part)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

INSERT IGNORE INTO cluster_leases (part) VALUES
	(0), (1), (2), (3), (4), (5), (6), (7), (8), (9), (10), (11), (12), (13), (14), (15),
	(16), (17), (18), (19), (20), (21), (22), (23), (24), (25), (26), (27), (28), (29), (30), (31),
	(32), (33), (34), (35), (36), (37), (38), (39), (40), (41), (42), (43), (44), (45), (46), (47),
	(48), (49), (50), (51), (52), (53), (54), (55), (56), (57), (58), (59), (60), (61), (62), (63);

-- One row per group commit that created orders: origin is the store value
-- that wrote it (a process skips its own), body its created pending orders
-- as "<id>:<deadline ms>,…". Kept about a minute (WatchCreated prunes it).
CREATE TABLE IF NOT EXISTS order_feed (
	seq        BIGINT NOT NULL AUTO_INCREMENT,
	origin     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	created_at BIGINT NOT NULL,
	body       MEDIUMTEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
	PRIMARY KEY (seq),
	KEY order_feed_created_at (created_at)
) ENGINE = InnoDB;
