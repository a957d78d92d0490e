-- seq and requested_at of timer_requests are hourglass's, whatever a shop's
-- INSERT says (issue 37): one INSERT … (seq, …) VALUES
-- (9223372036854775807, …) set AUTO_INCREMENT past its end, and every later
-- INSERT of every shop failed with error 167 until an ALTER TABLE; a seq
-- just ahead of the counter made later INSERTs fail with a duplicate key;
-- a requested_at of the shop's choosing moved its delay. This trigger sets
-- both before the row is written, so even a careless root session cannot
-- break the table for the others: seq NULL, which InnoDB replaces with the
-- next AUTO_INCREMENT value whatever the session's sql_mode
-- (NO_AUTO_VALUE_ON_ZERO included), and requested_at the server's clock in
-- UTC (the column's default). Creating it needs the TRIGGER privilege
-- (docs/stores.md); with binary logging on, MySQL also asks for SUPER or
-- log_bin_trust_function_creators = 1.
DROP TRIGGER IF EXISTS timer_requests_own_columns;
CREATE TRIGGER timer_requests_own_columns BEFORE INSERT ON timer_requests FOR EACH ROW SET NEW.seq = NULL, NEW.requested_at = UTC_TIMESTAMP(3);
