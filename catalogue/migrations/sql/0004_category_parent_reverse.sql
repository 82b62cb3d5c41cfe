-- Going back: the tree guard goes, its trigger and then its function. The parent column is dropped
-- next, by the reverse of its AddField.
DROP TRIGGER catalogue_category_tree_guard ON catalogue_category;
DROP FUNCTION catalogue_category_tree_guard();
