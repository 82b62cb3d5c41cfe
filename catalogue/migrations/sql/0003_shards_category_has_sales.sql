-- Categories that stored sales name are marked has_sales, and so kept from deletion: one scan of the
-- raw sales, once; from here on the ingest marks each category the first time a sale names it.
UPDATE catalogue_category SET has_sales = true
            WHERE slug IN (SELECT DISTINCT unnest(categories) FROM rankings_sale);
