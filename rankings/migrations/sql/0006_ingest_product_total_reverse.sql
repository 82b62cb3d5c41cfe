-- Going back: the totals go. The table itself is dropped next, by the reverse of its CreateModel.
TRUNCATE rankings_producttotal;
