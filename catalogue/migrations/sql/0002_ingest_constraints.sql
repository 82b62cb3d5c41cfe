-- A negative price was never meaningful (a sale without an amount would have negative revenue): such
-- prices become 0, like a placeholder's, so that the constraint product_price_not_negative can be
-- added next.
UPDATE catalogue_product SET price_cents = 0 WHERE price_cents < 0;
