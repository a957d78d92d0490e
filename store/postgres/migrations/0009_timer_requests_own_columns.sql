-- seq and requested_at of timer_requests are hourglass's, whatever a shop's
-- INSERT says (issue 37). An identity column GENERATED ALWAYS still takes
-- an explicit value under OVERRIDING SYSTEM VALUE, which any role with
-- INSERT may write: a seq the sequence will hand out later made every
-- later INSERT of the shops fail with a duplicate key until the sequence
-- passed it, and a requested_at of the shop's choosing moved its delay.
-- This trigger sets both before the row is written: seq from the
-- sequence, requested_at the statement's time (the column's default).
-- SECURITY DEFINER: a shop's role needs no privilege on the sequence.
CREATE OR REPLACE FUNCTION timer_requests_own_columns() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
	NEW.seq := nextval(pg_get_serial_sequence(quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME), 'seq'));
	NEW.requested_at := statement_timestamp();
	RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS timer_requests_own_columns ON timer_requests;
CREATE TRIGGER timer_requests_own_columns BEFORE INSERT ON timer_requests
	FOR EACH ROW EXECUTE FUNCTION timer_requests_own_columns();
