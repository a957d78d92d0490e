-- Find (issue #39): GET /v1/orders filters by user and by deadline and
-- creation ranges, each read from an index in the list's order (sqlq's
-- ListOrdersSQL). A deadline range uses orders_status_deadline (0001) per
-- status, so only two indexes are new: every index is one more entry to
-- write for each order created and each status change. Each CREATE INDEX
-- holds writes to orders while it builds (seconds for millions of rows).

-- ?user_id= pages through one user's orders by id.
CREATE INDEX orders_user_id ON orders (user_id, id);
-- ?created_after=&created_before= page by (created_at, id) within each
-- status.
CREATE INDEX orders_status_created ON orders (status, created_at, id);
