-- Every product's lifetime gross (units and revenue of its accepted sales, returns not counted), from
-- the sales stored so far. From here on the ingest keeps it, and refuses a sale that would take it
-- past what a Redis score and a bucket sum hold exactly.
INSERT INTO rankings_producttotal (product_id, units, revenue_cents)
            SELECT product_id, sum(qty), greatest(sum(amount_cents), 0)
            FROM rankings_sale WHERE qty > 0
            GROUP BY product_id;
