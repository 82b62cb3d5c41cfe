-- Going back: the engagement events go, with every day's partition (there was no table for them).
DROP TABLE rankings_engagement;
