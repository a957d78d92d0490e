-- Bulk actions (issue #39, sqlq's bulk.go): a filtered bulk action, the
-- lease of the node running it (owner, lease_until) and its progress
-- (resume_at, matched, done, failed), written with each page of items in
-- one transaction. running_key is set only while it runs: unique, so the
-- same filter and action cannot run twice at once. Finished actions are
-- pruned along bulk_actions_finished (retention), and at most 10 run at
-- once: the table stays small.
CREATE TABLE bulk_actions (
	id          TEXT PRIMARY KEY,
	kind        TEXT NOT NULL,
	reason      TEXT NOT NULL,
	spec        TEXT NOT NULL,
	running_key TEXT UNIQUE,
	rate        INTEGER NOT NULL,
	state       TEXT NOT NULL,
	matched     INTEGER NOT NULL,
	done        INTEGER NOT NULL,
	failed      INTEGER NOT NULL,
	resume_at   TEXT NOT NULL,
	owner       TEXT,
	lease_until INTEGER,
	last_error  TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	updated_at  INTEGER NOT NULL,
	finished_at INTEGER
) WITHOUT ROWID;
-- A claim reads the running ones; they are at most 10.
CREATE INDEX bulk_actions_state ON bulk_actions (state);
CREATE INDEX bulk_actions_finished ON bulk_actions (finished_at) WHERE finished_at IS NOT NULL;
