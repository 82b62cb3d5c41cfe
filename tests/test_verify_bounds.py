"""The sampled verify, every few minutes, on a board of millions: it checks a large board by its
size and its first ranks, never reading it whole into the worker, and still finds a damaged one."""

import pytest

from rankings.engine import store
from rankings.operations import verify

from .rankings_helpers import Shop

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCTS = 150  # each board of `toys` and `all`: more than the bound below, more than a blob holds


class RedisValues:
    """Values Redis sends back to the ranking store (a list counts its items)."""

    def __init__(self, monkeypatch):
        import redis

        self.values = 0
        counter = self
        original_command = redis.Redis.execute_command
        original_pipeline = redis.client.Pipeline.execute

        def execute_command(self, *args, **options):
            reply = original_command(self, *args, **options)
            counter.values += _size(reply)
            return reply

        def execute(self, *args, **options):
            replies = original_pipeline(self, *args, **options)
            counter.values += _size(replies)
            return replies

        monkeypatch.setattr(redis.Redis, "execute_command", execute_command)
        monkeypatch.setattr(redis.client.Pipeline, "execute", execute)


def _size(reply) -> int:
    if isinstance(reply, list | tuple):
        return sum(_size(item) for item in reply)
    return 1


@pytest.fixture
def large():
    """Boards of PRODUCTS members, views and wishes included."""
    shop = Shop()
    shop.send(*(shop.sale(f"p{i:03}", qty=1 + i % 7, amount=f"{1 + i % 5}.00") for i in range(PRODUCTS)))
    shop.engage(*(shop.engagement(f"p{i:03}", kind="view") for i in range(PRODUCTS)))
    shop.tick()
    return shop


def test_a_large_board_is_checked_by_its_size_and_first_ranks_not_read_whole(large, monkeypatch):
    # given a check of 20 members drawn from each board
    monkeypatch.setattr(verify, "VERIFY_SPOT_MEMBERS", 20, raising=False)
    # when the sampled verify checks `toys` and `all`
    replies = RedisValues(monkeypatch)
    report = verify.verify_sampled(categories=["toys", "all"])
    # then every board of both is found exact, and far fewer values came back than the boards hold
    assert report.boards == 2 * 16 and not report.differences and not report.repaired
    boards_of_150 = 2 * 4 * 4  # two categories, four windows, sales and views boards, two metrics each
    assert replies.values < boards_of_150 * PRODUCTS / 2
    large.assert_exact()


@pytest.mark.parametrize(
    "damage", ["evicted", "member lost", "score changed deep", "score changed at the top"]
)
def test_a_damaged_board_is_found_and_rebuilt(large, damage):
    """Every member of a board of at most VERIFY_SPOT_MEMBERS is checked; above it, the size, the
    first ranks and that many members drawn at random."""
    # given one of `toys`'s large boards damaged in Redis, as eviction or a lost write leaves it
    version = store.served_version()
    shard = next(
        s for s in range(8) if store.patient().exists(store.board_key(version, s, "7d", "units", "toys"))
    )
    key = store.board_key(version, shard, "7d", "units", "toys")
    r = store.patient()
    if damage == "evicted":
        r.delete(key)
    elif damage == "member lost":
        r.zrem(key, "p147")  # one unit: among the last ranks
    elif damage == "score changed deep":
        r.zincrby(key, -1, "p140")  # one unit more than the buckets say, still below rank 100
    else:
        r.zincrby(key, 1, "p006")  # seven units: at the top
    # when the sampled verify checks it
    report = verify.verify_sampled(categories=["toys"])
    # then the board's shard is rebuilt, and the boards are exact again
    assert report.repaired == [shard]
    large.assert_exact()


def test_the_sample_is_drawn_through_the_index_not_by_sorting_every_category():
    """A million categories: a sample of 20 is 20 probes of the key, not a random order of the table."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from catalogue.models import Category

    # given 300 categories
    Category.objects.bulk_create([Category(slug=f"c{i:03}", name=f"C {i:03}") for i in range(300)])
    # when three are drawn, many times
    with CaptureQueriesContext(connection) as queries:
        draws = [verify.sample_categories(3) for _ in range(20)]
    # then no statement sorted the table, and the draws differ, three categories each
    assert not [q["sql"] for q in queries if "RANDOM()" in q["sql"].upper()]
    assert all(len(set(draw)) == 3 for draw in draws)
    assert len({tuple(draw) for draw in draws}) > 1
