"""Every Redis key's name (the layout is described in the package's docstring)."""

from rankings.conf import other_metric, rankings_settings

# Ranks kept in a board's blob: the first page of every list and the product
# page badges of the best sellers come from one GET, the read that is asked most.
BLOB_SIZE = 100
# Marks a rebuild's temporary board, written beside the live one until the swap.
TEMP_MARK = ":rebuild:"
# The fields of a shard's state a read takes with its boards.
STATE_READ = ("asof", "seq", "gen")


def prefix() -> str:
    return rankings_settings.KEY_PREFIX


def active_key() -> str:
    return f"{prefix()}:active"


def gen_key(version: int) -> str:
    return f"{prefix()}:v{version}:gen"


def shards_key(version: int) -> str:
    return f"{prefix()}:v{version}:shards"


def shard_tag(version: int, shard: int) -> str:
    return f"{prefix()}:v{version}:{{s{shard}}}"


def state_key(version: int, shard: int) -> str:
    return f"{shard_tag(version, shard)}:state"


def board_key(version: int, shard: int, window: str, metric: str, category: str) -> str:
    return f"{shard_tag(version, shard)}:b:{window}:{metric}:{category}"


def blob_key(version: int, shard: int, window: str, metric: str, category: str) -> str:
    return f"{shard_tag(version, shard)}:t:{window}:{metric}:{category}"


def board_keys(version: int, shard: int, window: str, metric: str, category: str) -> tuple[str, str, str]:
    """A board's key, the other metric's board's and the board's blob: what a blob is made from."""
    return (
        board_key(version, shard, window, metric, category),
        board_key(version, shard, window, other_metric(metric), category),
        blob_key(version, shard, window, metric, category),
    )


def pair_keys(tag: str, window: str, category: str, pair: tuple[str, str]) -> tuple[str, ...]:
    """board_keys of both metrics of `pair` (first, then second) on the shard of `tag` (its
    shard_tag): six keys, made without looking the prefix up again (a batch names 100,000s)."""
    first, second = (f"{tag}:b:{window}:{metric}:{category}" for metric in pair)
    return (
        first,
        second,
        f"{tag}:t:{window}:{pair[0]}:{category}",
        second,
        first,
        f"{tag}:t:{window}:{pair[1]}:{category}",
    )


def member_keys(version: int, shard: int, window: str, metric: str, category: str) -> list[str]:
    """A board's key, the other metric's board's and its shard's state: what a member's rank reads."""
    return [
        board_key(version, shard, window, metric, category),
        board_key(version, shard, window, other_metric(metric), category),
        state_key(version, shard),
    ]


def wake_key(group: int) -> str:
    return f"{prefix()}:wake:{group}"


def version_pattern(version: int) -> str:
    """Every key of a version."""
    return f"{prefix()}:v{version}:*"


def boards_pattern(version: int) -> str:
    """Every board of a version (its rebuilds' temporary boards too)."""
    return f"{prefix()}:v{version}:*:b:*"


def board_of_key(key: str) -> tuple[str, str, str]:
    """(window, metric, category) of a board's key."""
    window, metric, category = key.split(":b:", 1)[1].split(":", 2)
    return window, metric, category
