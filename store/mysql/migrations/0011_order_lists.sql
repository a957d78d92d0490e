-- Find (issue #39): GET /v1/orders filters by user and by deadline and
-- creation ranges, each read from an index in the list's order (sqlq's
-- ListOrdersSQL). A deadline range uses orders_status_deadline (0001) per
-- status, so only two indexes are new: every index is one more entry to
-- write for each order created and each status change. InnoDB appends the
-- primary key to a secondary index: these end in id. Re-runnable: an index
-- that exists already (error 1061) counts as added.

-- ?user_id= pages through one user's orders by id.
ALTER TABLE orders ADD KEY orders_user_id (user_id);
-- ?created_after=&created_before= page by (created_at, id) within each
-- status.
ALTER TABLE orders ADD KEY orders_status_created (status, created_at);
