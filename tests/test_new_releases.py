"""Hot new releases cost what /top costs, whatever the board's size and whatever ticks do meanwhile:
a bounded number of Redis round trips and SQL statements, one answer per board sliced for every
page, and pages past the list's depth refused before anything is read."""

import datetime as dt
import itertools

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalogue.models import Category, Product
from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.engine.shards import Layout
from rankings.serving import moves

from .redis_round_trips import RedisRoundTrips

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 3, 2, 12, 0, 0, tzinfo=dt.UTC)
OLD = NOW - dt.timedelta(days=100)  # released long before the new-releases window
WINDOW = "7d"

_seq = itertools.count(1)


def _board(
    settings,
    units: dict[str, int],
    *,
    released: dict[str, dt.datetime],
    as_of: dt.datetime = NOW,
    categories=("toys",),
):
    """A board of each of `categories` with `units` (product -> units, revenue 100 × units), as a
    tick would leave it as of `as_of`, and the catalogue's products with the editor's `released`
    dates; the shard of the first category."""
    Category.objects.get_or_create(slug="toys", defaults={"name": "Toys"})
    Product.objects.bulk_create(
        [Product(product_id=pid, name=f"name {pid}", released_at=released.get(pid, OLD)) for pid in units],
        ignore_conflicts=True,
    )
    layout = Layout(rankings_settings.SHARDS)
    store.shard_layout_set(1, layout.shards, layout.pinned)
    shards: dict[int, dict] = {}
    for category in categories:
        boards = shards.setdefault(layout.shard_of(category), {})
        boards[WINDOW, "units", category] = dict(units)
        boards[WINDOW, "revenue", category] = {pid: 100 * n for pid, n in units.items()}
    for shard, boards in shards.items():
        store.shard_replace(
            version=1,
            shard=shard,
            seq=next(_seq),
            as_of=as_of.timestamp(),
            gen=store.generation(1),
            boards=boards,
        )
    return layout.shard_of(categories[0])


def _big_board(settings, size: int, **options):
    """`size` products on toys, of which the three released two days ago are new: n3 > n2 > n1."""
    units = {f"p{i:05}": 1 + i % 50 for i in range(size)}
    units |= {"n1": 7, "n2": 30, "n3": 900}
    recent = NOW - dt.timedelta(days=2)
    return _board(settings, units, released={"n1": recent, "n2": recent, "n3": recent}, **options)


def _new(**params):
    args = {"category": "toys", "window": WINDOW, "metric": "units", "limit": 50, "offset": 0} | params
    return moves.board_new(**args)


def test_new_releases_of_a_large_board_cost_a_bounded_number_of_reads(settings, monkeypatch):
    """A board of 6,000 products of which three are new: the read is a few Redis round trips and
    two SQL statements (the new products, their names), not the whole board a chunk at a time."""
    _big_board(settings, 6000)
    _new(window="1d")  # what any read leaves in memory: the active version, the layout, the script
    trips = RedisRoundTrips(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        board = _new(limit=2)
    assert [(i.rank, i.product_id, i.units) for i in board.items] == [(1, "n3", 900), (2, "n2", 30)]
    assert board.total == 3
    assert trips.count <= 3, f"{trips.count} Redis round trips"
    assert len(queries) <= 2, [q["sql"] for q in queries]


def test_one_answer_per_board_serves_every_page_of_it(settings, monkeypatch):
    """Other limits and offsets are slices of the board's one answer: no SQL statement for the
    releases again, one small Redis read to see that the shard has not changed."""
    _big_board(settings, 300)
    assert [i.product_id for i in _new().items] == ["n3", "n2", "n1"]
    trips = RedisRoundTrips(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        pages = [_new(limit=limit, offset=offset) for limit, offset in [(1, 0), (1, 1), (2, 1), (7, 2)]]
    assert [[(i.rank, i.product_id) for i in page.items] for page in pages] == [
        [(1, "n3")],
        [(2, "n2")],
        [(2, "n2"), (3, "n1")],
        [(3, "n1")],
    ]
    assert not any("released_at" in q["sql"] for q in queries), [q["sql"] for q in queries]
    assert trips.count <= len(pages)


def test_a_tick_between_two_reads_does_not_make_the_read_start_over(settings, monkeypatch):
    """Ticks land between every two Redis round trips of the request (the shard's asOf moves on
    each time): the read still answers, exactly, after a bounded number of round trips."""
    shard = _big_board(settings, 4500)
    ticker = redis.Redis.from_url(settings.REDIS_URL)
    state = store.state_key(1, shard)
    trips = RedisRoundTrips(monkeypatch)
    pool = store.fast().connection_pool
    original = redis.client.Pipeline.execute
    original_command = redis.Redis.execute_command

    def tick_after(reply):
        if trips.count > 50:
            raise AssertionError("the read started over without bound")
        ticker.hincrbyfloat(state, "asof", 1)
        ticker.hincrby(state, "seq", 1)
        return reply

    def execute(self, *args, **options):
        reply = original(self, *args, **options)
        return tick_after(reply) if self.connection_pool is pool else reply

    def execute_command(self, *args, **options):
        reply = original_command(self, *args, **options)
        return tick_after(reply) if self.connection_pool is pool else reply

    monkeypatch.setattr(redis.client.Pipeline, "execute", execute)
    monkeypatch.setattr(redis.Redis, "execute_command", execute_command)
    board = _new()
    assert [i.product_id for i in board.items] == ["n3", "n2", "n1"]
    assert board.total == 3
    assert trips.count <= 5  # and one for its products' names, from Redis's copy


def test_only_the_latest_releases_count_past_the_bound(settings):
    """More products released within NEW_DAYS than NEW_MOST: the NEW_MOST latest of them are the
    new releases (a bounded read, documented), ranked among themselves."""
    settings.RANKINGS = {**settings.RANKINGS, "NEW_MOST": 3}
    units = {"a": 50, "b": 40, "c": 30, "d": 20, "e": 10}
    released = {pid: NOW - dt.timedelta(days=1 + i) for i, pid in enumerate(["e", "a", "d", "b", "c"])}
    _board(settings, units, released=released)
    board = _new()
    assert [(i.rank, i.product_id) for i in board.items] == [(1, "a"), (2, "d"), (3, "e")]
    assert board.total == 3


class TestPagesPastTheDepth:
    def test_a_new_releases_page_past_10_000_ranks_is_404_before_any_read(
        self, settings, client, monkeypatch
    ):
        _big_board(settings, 10)
        assert client.get("/c/toys/new/").status_code == 200
        trips = RedisRoundTrips(monkeypatch)
        for page in (201, 999_999_999):
            assert client.get(f"/c/toys/new/?page={page}").status_code == 404
        assert trips.count == 0

    def test_the_api_refuses_an_offset_past_10_000_ranks(self, settings, api):
        _big_board(settings, 10)
        assert api.get("/v1/categories/toys/new?offset=9990&limit=20").status_code == 400
        assert api.get("/v1/categories/toys/new?offset=9950&limit=50").json()["items"] == []


def test_the_latest_releases_are_read_once_for_the_boards_read_together(settings):
    """Every board of one instant has the same latest releases: reading the new releases of several
    boards costs one statement for them, not one per board."""
    _big_board(settings, 50)
    with CaptureQueriesContext(connection) as queries:
        for window, metric in [("7d", "units"), ("7d", "revenue"), ("1d", "units"), ("30d", "views")]:
            _new(window=window, metric=metric)
    assert sum("released_at" in q["sql"] for q in queries) == 1, [q["sql"] for q in queries]


def test_a_badge_deeper_than_any_page_links_to_the_boards_first_page(settings, client):
    """Ranked last of 10,053: no page holds the rank, so the badge links to the board, not to a 404."""
    _big_board(settings, 10_050, categories=("toys", "all"))
    Product.objects.get(product_id="p10000").categories.set([Category.objects.get(slug="toys")])
    page = client.get("/p/p10000/")
    assert page.status_code == 200
    (badge,) = [b for b in page.context["badges"] if b["category"] == "toys"]
    assert badge["rank"] > 10_000
    assert badge["url"] == "/c/toys/"
    assert client.get(badge["url"]).status_code == 200
