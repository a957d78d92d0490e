-- Bulk actions (issue #39, sqlq's bulk.go): a filtered bulk action, the
-- lease of the node running it (owner, lease_until) and its progress
-- (resume_at, matched, done, failed), written with each page of items in
-- one transaction. running_key is set only while it runs: unique (NULLs
-- do not collide), so the same filter and action cannot run twice at
-- once. Finished actions are pruned along bulk_actions_finished
-- (retention), and at most 10 run at once: the table stays small.
-- Re-runnable: IF NOT EXISTS.
CREATE TABLE IF NOT EXISTS bulk_actions (
	id          VARCHAR(32) NOT NULL PRIMARY KEY,
	kind        VARCHAR(32) NOT NULL,
	reason      VARCHAR(2000) NOT NULL,
	spec        TEXT NOT NULL,
	running_key VARCHAR(64) NULL,
	rate        INT NOT NULL,
	state       VARCHAR(16) NOT NULL,
	matched     BIGINT NOT NULL,
	done        BIGINT NOT NULL,
	failed      BIGINT NOT NULL,
	resume_at   TEXT NOT NULL,
	owner       VARCHAR(300) NULL,
	lease_until BIGINT NULL,
	last_error  TEXT NOT NULL,
	created_at  BIGINT NOT NULL,
	updated_at  BIGINT NOT NULL,
	finished_at BIGINT NULL,
	UNIQUE KEY bulk_actions_running_key (running_key),
	KEY bulk_actions_state (state),
	KEY bulk_actions_finished (finished_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
