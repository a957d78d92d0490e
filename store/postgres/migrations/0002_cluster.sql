-- The cluster (hourglass.ClusterStore): the nodes sharing the database and
-- the lease of each partition. Times are BIGINT unix milliseconds of the
-- database server's clock, whatever clock the store was opened with: every
-- node reads the same one, so leases agree across processes.

-- One row per running node, from its first heartbeat until it leaves. Ids
-- compare bytewise ("C"), so ClusterState lists nodes in the same order on
-- every server whatever its locale, as Go sorts strings.
CREATE TABLE cluster_nodes (
	id         TEXT COLLATE "C" PRIMARY KEY,
	addr       TEXT NOT NULL,
	started_at BIGINT NOT NULL,
	last_seen  BIGINT NOT NULL
);

-- One row per partition (hourglass.Partitions, 64: part of the schema),
-- never inserted or deleted after this migration, so every lease change is
-- a compare-and-set UPDATE of an existing row. owner '' is free; epoch
-- grows by one each time the partition changes owner and is kept when it is
-- released.
CREATE TABLE cluster_leases (
	part       INTEGER PRIMARY KEY CHECK (part >= 0 AND part < 64),
	owner      TEXT NOT NULL DEFAULT '',
	epoch      BIGINT NOT NULL DEFAULT 0,
	expires_at BIGINT NOT NULL DEFAULT 0
);
INSERT INTO cluster_leases (part) SELECT generate_series(0, 63);
