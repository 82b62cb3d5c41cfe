-- Going back: no category is marked. The column itself is dropped next, by the reverse of its
-- AddField.
UPDATE catalogue_category SET has_sales = false WHERE has_sales;
