-- Products keyed by their SKU alone (WITHOUT ROWID): a create reads and
-- updates each of its products by SKU, which in a rowid table is two
-- b-tree searches (the SKU's unique index, then the row by rowid), here
-- one. Every create's batch does both for each SKU it touches
-- (docs/benchmarks/sqlite-rate.md). Nothing reads a product's rowid.
CREATE TABLE products_by_sku (
	sku       TEXT PRIMARY KEY,
	name      TEXT NOT NULL,
	category  TEXT NOT NULL,
	available INTEGER NOT NULL CHECK (available >= 0),
	reserved  INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0),
	sold      INTEGER NOT NULL DEFAULT 0 CHECK (sold >= 0)
) WITHOUT ROWID;
INSERT INTO products_by_sku (sku, name, category, available, reserved, sold)
	SELECT sku, name, category, available, reserved, sold FROM products;
DROP TABLE products;
ALTER TABLE products_by_sku RENAME TO products;
