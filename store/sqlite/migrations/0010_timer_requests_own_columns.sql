-- A process writing this database file cannot set timer_requests' seq or
-- requested_at: one INSERT … (seq, …) VALUES (9223372036854775807, …) left
-- AUTOINCREMENT no larger key, and every later INSERT of every writer
-- failed (SQLITE_FULL); a requested_at of the writer's choosing moved its
-- delay. SQLite's triggers cannot change NEW, so a row naming either
-- column is inserted again without them (its seq the next one, its
-- requested_at the database's clock) and the writer's own INSERT of it is
-- ignored (RAISE(IGNORE); that writer's changes() then counts 0).
-- NEW.seq is -1 in a BEFORE INSERT trigger when the INSERT left it to
-- AUTOINCREMENT, and 'now' is the same through one statement, so the
-- insert the trigger makes, and every ordinary one, pass it by.
CREATE TRIGGER IF NOT EXISTS timer_requests_own_columns BEFORE INSERT ON timer_requests
FOR EACH ROW WHEN NEW.seq <> -1 OR NEW.requested_at IS NOT strftime('%Y-%m-%d %H:%M:%f', 'now')
BEGIN
	INSERT INTO timer_requests (timer_key, action, fire_at, delay_ms, payload, webhook_id)
	VALUES (NEW.timer_key, NEW.action, NEW.fire_at, NEW.delay_ms, NEW.payload, NEW.webhook_id);
	SELECT RAISE(IGNORE);
END;
