-- Each product's first sale (the ts of its earliest accepted sale, returns excluded): its release,
-- unless an editor sets one. One scan of the raw sales, once; from here on the ingest keeps it.
UPDATE rankings_producttotal t SET first_sold_at = f.first
            FROM (SELECT product_id, min(ts) AS first FROM rankings_sale WHERE qty > 0 GROUP BY product_id) f
            WHERE f.product_id = t.product_id;
