-- Going back: no product has a first sale any more. The column itself is dropped next, by the
-- reverse of its AddField.
UPDATE rankings_producttotal SET first_sold_at = NULL WHERE first_sold_at IS NOT NULL;
