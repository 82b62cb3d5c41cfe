"""What the most expensive anonymous read of each kind costs on a large board: the same Redis
round trips and the same handful of rows as on a small one (docs/architecture.md, "Every request
bounded")."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from rankings.engine import store
from rankings.models import RankingVersion
from rankings.serving import layouts, memory

from .rankings_helpers import Shop

pytestmark = [pytest.mark.django_db, pytest.mark.single_redis]

MEMBERS = 20_000  # on the board read: deeper than any list may go (offset + limit ≤ 10,000)


class RedisReplies:
    """Round trips to the ranking store's read connection, and the values Redis sent back on it (a
    list counts its items); the throttle's counters, in Django's cache, are not counted."""

    def __init__(self, monkeypatch):
        import redis

        self.trips = self.values = 0
        counter = self
        pool = store.fast().connection_pool
        original_command = redis.Redis.execute_command
        original_pipeline = redis.client.Pipeline.execute

        def execute_command(self, *args, **options):
            reply = original_command(self, *args, **options)
            if self.connection_pool is pool:
                counter.add([reply])
            return reply

        def execute(self, *args, **options):
            replies = original_pipeline(self, *args, **options)
            if self.connection_pool is pool:
                counter.add(replies)
            return replies

        original_immediate = redis.client.Pipeline.immediate_execute_command

        def immediate(self, *args, **options):  # sent at once, before the pipeline (SCRIPT EXISTS)
            reply = original_immediate(self, *args, **options)
            if self.connection_pool is pool:
                counter.add([reply])
            return reply

        monkeypatch.setattr(redis.Redis, "execute_command", execute_command)
        monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
        monkeypatch.setattr(redis.client.Pipeline, "immediate_execute_command", immediate)

    def add(self, replies: list) -> None:
        self.trips += 1
        self.values += sum(_size(reply) for reply in replies)


def _size(reply) -> int:
    if isinstance(reply, list | tuple):
        return sum(_size(item) for item in reply)
    if isinstance(reply, dict):
        return len(reply)
    return 1


@pytest.fixture
def big_board(redis_client):
    """The 7-day units and revenue boards of `toys` with MEMBERS products besides p1 (two units):
    half sold five, half one, so p1 ranks in the middle."""
    shop = Shop(now=timezone.now().replace(microsecond=0))
    shop.send(shop.sale("p1", qty=2, amount="2.00"))
    shop.tick()
    version = store.served_version(fresh=True)
    shard = layouts.layout_of(version).shard_of("toys")
    pipe = redis_client.pipeline(transaction=False)
    for metric in ("units", "revenue"):
        key = store.board_key(version, shard, "7d", metric, "toys")
        scores = {f"m{i:05}": -(5 if i % 2 else 1) for i in range(MEMBERS)}
        for start in range(0, MEMBERS, 5000):
            chunk = dict(list(scores.items())[start : start + 5000])
            pipe.zadd(key, chunk)
    pipe.execute()
    memory.forget_all()
    return shop


def test_the_deepest_page_of_a_large_board_reads_one_page(api, big_board, monkeypatch):
    # given the active version and names known
    api.get("/v1/categories/toys/top?limit=100&offset=200")
    memory.forget_all("answers")
    replies = RedisReplies(monkeypatch)
    # when the deepest page a client may ask for is read
    with CaptureQueriesContext(connection) as queries:
        reply = api.get("/v1/categories/toys/top?limit=100&offset=9900")
    # then
    assert reply.status_code == 200
    assert [item["rank"] for item in reply.json()["items"]] == list(range(9901, 10001))
    assert replies.trips <= 3  # the page, the other metric and state; the names from Redis's copy
    assert replies.values <= 2 * 100 + 100 + 10 + 100  # the page with scores, the other metric, state, names
    assert len(queries) <= 1  # the names Redis's copy lacks
    # and one deeper is refused before anything is read
    assert api.get("/v1/categories/toys/top?limit=100&offset=9901").status_code == 400


def test_neighbours_read_at_most_2n_plus_one_members(api, big_board, monkeypatch):
    api.get("/v1/products/p1/neighbors?category=toys&n=1")
    memory.forget_all("answers")
    replies = RedisReplies(monkeypatch)

    with CaptureQueriesContext(connection) as queries:
        reply = api.get("/v1/products/p1/neighbors?category=toys&n=50")

    assert reply.status_code == 200
    assert len(reply.json()["items"]) == 101
    # its rank and the members around it, with both metrics and their names, in one call
    assert replies.trips == 1
    assert replies.values <= 3 * 101 + 20 + 101
    # the names Redis's copy lacks; a ranked product needs no catalogue lookup of its own
    assert len(queries) <= 1
    assert api.get("/v1/products/p1/neighbors?category=toys&n=51").status_code == 400


def test_thresholds_of_a_large_board_are_one_round_trip_of_a_few_values(api, big_board, monkeypatch):
    api.get("/v1/categories/toys/top?limit=1")
    memory.forget_all("answers")
    replies = RedisReplies(monkeypatch)

    reply = api.get("/v1/categories/toys/thresholds")

    assert reply.status_code == 200
    assert [t["rank"] for t in reply.json()["thresholds"]] == [1, 10, 100, 1000, 10000]
    assert replies.trips <= 2
    assert replies.values <= 5 * 3 + 49 + 10  # five ranks, one count per histogram edge, state


def test_the_liveness_answer_and_the_docs_cost_no_query(api, big_board):
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/v1/status").status_code == 200
        assert api.get("/v1/docs").status_code == 200

    assert not queries


def test_a_thousand_categories_with_their_paths_cost_a_fixed_number_of_queries(api, big_board):
    """`path` is worked out from the tree held in memory, at most six levels per category."""
    from catalogue.models import Category

    # given a thousand categories six levels deep in the tree that counts
    Category.objects.bulk_create([Category(slug=f"k{i:04}", name=f"K {i:04}") for i in range(1000)])
    tree = {f"k{i:04}": f"k{i - 1:04}" for i in range(1000) if i % 6}
    RankingVersion.objects.filter(number=store.served_version()).update(tree=tree)
    memory.forget_all()
    # when a page of them is read
    with CaptureQueriesContext(connection) as queries:
        reply = api.get("/v1/categories?limit=1000&offset=1")
    # then
    assert reply.status_code == 200
    items = reply.json()["items"]
    assert len(items) == 1000 and max(len(item["path"]) for item in items) == 6
    assert len(queries) <= 3  # the page, the count, the tree


def test_movers_of_a_large_board_read_its_first_ranks_only(api, redis_client, monkeypatch):
    """Movers compare the first RANKINGS_SNAPSHOT_DEPTH ranks with the snapshot a day before."""
    import datetime as dt

    from rankings.conf import rankings_settings

    from .rankings_helpers import START

    # given a snapshot a day before, and now 20,000 products on the 1-day board of `toys`
    shop = Shop()
    shop.send(shop.sale("p1", qty=2))
    shop.tick()
    shop.now = START + dt.timedelta(hours=24, minutes=30)
    shop.send(shop.sale("p1", qty=2))
    shop.tick()
    version = store.served_version(fresh=True)
    shard = layouts.layout_of(version).shard_of("toys")
    pipe = redis_client.pipeline(transaction=False)
    for metric in ("units", "revenue"):
        key = store.board_key(version, shard, "1d", metric, "toys")
        for start in range(0, MEMBERS, 5000):
            pipe.zadd(key, {f"m{i:05}": -(1 + i % 3) for i in range(start, start + 5000)})
    pipe.execute()
    memory.forget_all()
    api.get("/v1/categories/toys/top?window=1d&limit=1")
    memory.forget_all("answers")
    replies = RedisReplies(monkeypatch)
    # when the movers are read
    reply = api.get("/v1/categories/toys/movers?window=1d&limit=100")
    # then only the first ranks came back from Redis
    assert reply.status_code == 200
    assert len(reply.json()["items"]) == 100
    depth = rankings_settings.SNAPSHOT_DEPTH
    assert replies.trips <= 4  # and the names of the 100, from Redis's copy
    assert replies.values <= 3 * depth + 20 + 100  # members with scores, the other metric's, the state, names
