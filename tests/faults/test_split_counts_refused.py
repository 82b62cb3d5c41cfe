"""A split board's count of another part's members ordered before a product (lua/members_before.lua)
puts the product into that part with its score, reads its rank and takes it out again, in one call;
where Redis refuses the write (its memory full under noeviction, a user without write rights) the
call searches the tie group by halves instead. Either way the ranks and neighbours are those of one
sorted set. On the suite's own Redis (conftest.py): a full memory would refuse every other run's
writes."""

import pytest

from rankings.serving import board_reader, selectors

from ..test_split_reads import SINGLE, SPLIT, WINDOW, _same, _write

pytestmark = [pytest.mark.django_db, pytest.mark.faults]

# Two scores over 600 products: tie groups of about a hundred in each of three parts, more than the
# search by halves reads at once.
BOARD = {f"p{i:03d}": (1 + i % 2, 1 + i % 7) for i in range(600)}


def _zadd(client) -> tuple[int, int]:
    """ZADD's calls and rejected calls so far (INFO commandstats: a script's commands included)."""
    stats = client.info("commandstats").get("cmdstat_zadd", {})
    return int(stats.get("calls", 0)), int(stats.get("rejected_calls", 0))


@pytest.mark.parametrize("refused", [False, True], ids=["taken", "refused"])
def test_a_split_boards_ranks_are_one_sorted_sets_whether_redis_takes_the_counts_write_or_not(
    fault_redis, monkeypatch, refused
):
    from catalogue.models import Category

    Category.objects.create(slug=SPLIT, name="Big")
    Category.objects.create(slug=SINGLE, name="Reference")
    client = fault_redis.client
    _write(client, BOARD, 3)
    monkeypatch.setattr(board_reader, "BOARD_COPY_AFTER", 10**9)  # every read from Redis
    asked = sorted(BOARD)[::37]
    before = _zadd(client)
    if refused:
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", 1)  # bytes: every write refused
    try:
        for pid in asked:
            args = {"product_id": pid, "window": WINDOW, "metric": "units"}
            _same(
                selectors.product_rank(category=SPLIT, **args),
                selectors.product_rank(category=SINGLE, **args),
            )
            _same(
                selectors.product_neighbors(category=SPLIT, n=3, **args),
                selectors.product_neighbors(category=SINGLE, n=3, **args),
            )
        counted = _zadd(client)
        # and a product without a rank counts nothing in the other parts: only their sizes are used
        args = {"product_id": "nobody", "window": WINDOW, "metric": "units"}
        _same(selectors.product_rank(category=SPLIT, **args), selectors.product_rank(category=SINGLE, **args))
        assert _zadd(client) == counted
    finally:
        client.config_set("maxmemory", 0)
    calls, rejected = (after - then for after, then in zip(counted, before, strict=True))
    # Each product asked about, read twice (rank, neighbours), in the two parts not its own.
    counts = 2 * 2 * len(asked)
    if refused:
        assert rejected >= counts and calls == 0
    else:
        assert calls >= counts and rejected == 0
