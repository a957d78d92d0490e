-- Source reminders (issue #41, Source.RemindBefore): one row per reminder
-- of a shop's row settled, written in the transaction of its
-- source.expiring event (or of its skip: the row no longer pending, or
-- its deadline passed too): source, row key and the deadline it was for (unix ms, as
-- hourglass rounds it up). The primary key, not timing, keeps a reminder
-- to once per (source, key, deadline): a retry, a restart or another node
-- after a partition moved inserts nothing (ON DUPLICATE KEY UPDATE of
-- nothing), while a deadline the shop moved gets a row of its own. Led by
-- the deadline within a source, so the runner's pruning of the rows a day
-- past their deadline reads one range. Source names are 1-64 of a-z0-9_.
CREATE TABLE IF NOT EXISTS source_reminders (
	source_name VARCHAR(64) NOT NULL,
	deadline_ms BIGINT NOT NULL,
	row_key     BIGINT NOT NULL,
	PRIMARY KEY (source_name, deadline_ms, row_key)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
