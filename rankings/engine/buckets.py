"""The bucket sums: what a shard's buckets of one size add up to over a range of starts, per board
member, one column per metric of METRICS in its order.

The tick rebuilds a shard's boards with them (batches.shard_rebuild) and the hourly snapshots rank
them (snapshots.take): both read the boards from the same statement, so a metric added here is
counted by both.
"""

from rankings.conf import METRICS

# Each metric's column of rankings_bucket.
METRIC_COLUMNS = {"units": "units", "revenue": "revenue_cents", "views": "views", "wishes": "wishes"}


def bucket_sums(*, size: str = "%s", first: str = "%s", last: str = "%s") -> str:
    """The statement summing a shard's buckets of `size` whose start lies in [`first`, `last`]:
    rows of (category, product id, then one sum per metric of METRICS). The shard is the first
    query parameter; `size`, `first` and `last` are SQL expressions, query parameters by default
    (then the parameters are shard, size, first, last), or columns of a table the statement is
    joined to."""
    sums = ", ".join(f"sum({METRIC_COLUMNS[metric]})::bigint" for metric in METRICS)
    return f"""
SELECT category, product_id, {sums}
FROM rankings_bucket
WHERE shard = %s AND size = {size} AND start BETWEEN {first} AND {last}
GROUP BY category, product_id
"""
