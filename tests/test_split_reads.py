"""Split boards answer exactly like one sorted set: every read of a board kept as K parts (by a
stable hash of the product) against the same members in one board, through the real selectors on
the real Redis, with random members, many ties and random K."""

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalogue.models import Category, Product
from rankings.conf import rankings_settings
from rankings.engine import store
from rankings.engine.shards import Layout
from rankings.engine.split import part_index, part_names
from rankings.engine.store.names import bucket_of, names_key
from rankings.serving import answers, board_reader, catalogue_reads, memory, selectors, thresholds

from .rankings_helpers import run_keys

HASHED = 2
WINDOW = "7d"
SPLIT, SINGLE = "big", "ref"

# Ids of every length and byte (prefixes of one another, bytes a locale would reorder) and few
# distinct scores: ties everywhere, tie groups straddling the parts and the blob's 100 ranks.
ids = st.text(alphabet="aAbB0._:-zZ", min_size=1, max_size=5)
members = st.dictionaries(ids, st.tuples(st.integers(1, 4), st.integers(1, 6)), max_size=260)


@pytest.fixture
def catalogue(db):
    Category.objects.create(slug=SPLIT, name="Big")
    Category.objects.create(slug=SINGLE, name="Reference")


_seq = iter(range(1, 10**9))


def _write(redis_client, board: dict[str, tuple[int, ...]], parts: int) -> Layout:
    """`board` (product -> (units, revenue) or (units, revenue, views, wishes)) split `parts` ways
    under SPLIT and whole under SINGLE."""
    keys = run_keys(redis_client)
    if keys:
        redis_client.delete(*keys)
    store.reset_clients()
    memory.forget_all("answers")
    layout = Layout(HASHED + parts, part_names(SPLIT, parts))
    store.shard_layout_set(1, layout.shards, layout.pinned)
    gen = store.generation(1)
    Product.objects.bulk_create(
        [Product(product_id=pid, name=f"name {pid}", price_cents=100) for pid in [*board, "nobody"]],
        ignore_conflicts=True,
    )
    boards: dict[int, dict] = {shard: {} for shard in range(layout.shards)}
    for pid, figures in board.items():
        for category in (SINGLE, layout.board_of(SPLIT, pid)):
            shard_boards = boards[layout.shard_of(category)]
            for metric, score in zip(("units", "revenue", "views", "wishes"), figures, strict=False):
                shard_boards.setdefault((WINDOW, metric, category), {})[pid] = score
    as_of = float(int(time.time()))  # every shard at one instant, as after a tick
    for shard, shard_boards in boards.items():
        store.shard_replace(version=1, shard=shard, seq=next(_seq), as_of=as_of, gen=gen, boards=shard_boards)
    return layout


def _same(split, single):
    """Answers equal but for the category they name."""
    fields = [f for f in split.__slots__ if f != "category"]
    assert [getattr(split, f) for f in fields] == [getattr(single, f) for f in fields]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    board=members,
    parts=st.integers(2, 5),
    metric=st.sampled_from(["units", "revenue"]),
    pages=st.lists(st.tuples(st.integers(0, 280), st.integers(1, 100)), min_size=1, max_size=4),
    n=st.integers(1, 6),
    data=st.data(),
)
def test_every_read_of_a_split_board_equals_that_of_one_sorted_set(
    redis_client, catalogue, board, parts, metric, pages, n, data
):
    layout = _write(redis_client, board, parts)
    assert layout.split == {SPLIT: parts}
    # first pages (from the parts' blobs) and deep ones (from the parts' boards)
    for offset, limit in [(0, 1), (0, 10), (0, 100), (90, 20), *pages]:
        args = {"window": WINDOW, "metric": metric, "limit": limit, "offset": offset}
        _same(selectors.board_top(category=SPLIT, **args), selectors.board_top(category=SINGLE, **args))
    heads = selectors.boards_top_many(limits={SPLIT: 10, SINGLE: 10}, window=WINDOW, metric=metric)
    _same(heads[SPLIT], heads[SINGLE])
    asked = data.draw(st.lists(st.sampled_from(sorted(board)), max_size=6)) if board else []
    around = {}  # neighbours read from Redis, of the whole board
    for pid in [*asked, "nobody"]:
        args = {"product_id": pid, "window": WINDOW, "metric": metric}
        _same(selectors.product_rank(category=SPLIT, **args), selectors.product_rank(category=SINGLE, **args))
        around[pid] = selectors.product_neighbors(category=SINGLE, n=n, **args)
        _same(selectors.product_neighbors(category=SPLIT, n=n, **args), around[pid])
    # ranks and neighbours of random products, answered from copies of the board and of the parts
    # (as a reader of many products is)
    memory.forget_all("answers")
    copy_after = board_reader.BOARD_COPY_AFTER
    board_reader.BOARD_COPY_AFTER = 1
    try:
        for pid in [*asked, "nobody"]:
            args = {"product_id": pid, "window": WINDOW, "metric": metric}
            _same(
                selectors.product_rank(category=SPLIT, **args),
                selectors.product_rank(category=SINGLE, **args),
            )
            _same(selectors.product_neighbors(category=SPLIT, n=n, **args), around[pid])
            _same(selectors.product_neighbors(category=SINGLE, n=n, **args), around[pid])
    finally:
        board_reader.BOARD_COPY_AFTER = copy_after
    assert not board or board_reader._board_copies, "the premise: the ranks were read from copies"
    args = {"window": WINDOW, "metric": metric}
    _same(
        thresholds.board_thresholds(category=SPLIT, **args),
        thresholds.board_thresholds(category=SINGLE, **args),
    )
    for pid in asked[:2]:
        rank = selectors.product_rank(product_id=pid, category=SINGLE, **args)
        score = rank.units if metric == "units" else int(rank.revenue * 100)
        climb = {
            category: thresholds.product_climb(
                product_id=pid, category=category, rank=rank.rank, score=score, **args
            )
            for category in (SPLIT, SINGLE)
        }
        assert (climb[SPLIT] and (climb[SPLIT].more, climb[SPLIT].rank)) == (
            climb[SINGLE] and (climb[SINGLE].more, climb[SINGLE].rank)
        )


@pytest.mark.parametrize("metric", ["views", "wishes"])
def test_every_item_of_an_engagement_board_carries_the_products_own_sales_split_or_not(
    redis_client, catalogue, metric
):
    """On a views or wishes board each product's units and revenue are read beside from the part
    that holds it: /top, /neighbors and /ranks give the figures /rank gives, split board or not."""
    # given: 60 products with sales and engagement, split 3 ways under SPLIT, whole under SINGLE
    board = {f"p{i:02}": (1 + i, 100 * (7 + i), 1 + (i * 7) % 13, 1 + (i * 5) % 11) for i in range(60)}
    _write(redis_client, board, 3)
    for product in Product.objects.filter(product_id__in=board):
        product.categories.set(Category.objects.filter(slug__in=(SPLIT, SINGLE)))
    figures = {
        pid: (units, selectors.money(cents), views, wishes)
        for pid, (units, cents, views, wishes) in board.items()
    }

    def shown(item):
        return (item.units, item.revenue, item.views, item.wishes)

    for category in (SPLIT, SINGLE):
        # when: the board is read whole, and around some products
        top = selectors.board_top(category=category, window=WINDOW, metric=metric, limit=100, offset=0)
        # then: every item carries its product's own four figures
        assert {item.product_id: shown(item) for item in top.items} == figures
        for pid in ("p00", "p31", "p59"):
            args = {"product_id": pid, "window": WINDOW, "metric": metric}
            around = selectors.product_neighbors(category=category, n=3, **args)
            assert around.items and all(shown(item) == figures[item.product_id] for item in around.items)
            assert shown(selectors.product_rank(category=category, **args)) == figures[pid]
    for pid in ("p00", "p31", "p59"):
        ranks = selectors.product_ranks(product_id=pid, window=WINDOW, metric=metric)
        assert {r.category: shown(r) for r in ranks.ranks} == {SPLIT: figures[pid], SINGLE: figures[pid]}


def test_a_split_board_answers_a_rank_or_neighbours_in_one_round_trip_on_one_server_two_on_a_cluster(
    redis_client, catalogue, monkeypatch
):
    """A product's rank or neighbours on a split board: on one server, one call that reads every
    part; on a Redis Cluster, where no call reaches two parts, its own part's read (with the members
    either side of it there), then one read of every other part at once (the members ordered before
    it, and either side of that place). On a whole board each is one read. A first page is one read
    of every part at once; a deep page two (the windows, then the page's other metric)."""
    from .redis_round_trips import RedisRoundTrips

    # given: 300 products with ties, split 3 ways under SPLIT, whole under SINGLE, their names in
    # Redis's copies as the names' writers keep them (the shared one, and each part's own)
    layout = _write(redis_client, {f"p{i:03}": (1 + i % 9, 100 + i) for i in range(300)}, 3)
    for i in range(300):
        pid = f"p{i:03}"
        part = store.part_names_head(1, layout.shard_of(layout.board_of(SPLIT, pid)))
        for head in (store.names_head(), part):
            redis_client.hset(names_key(bucket_of(pid), head), pid, f"name {pid}")
    args = {"product_id": "p150", "window": WINDOW, "metric": "units"}
    reads = {
        ("rank", SPLIT): lambda: selectors.product_rank(category=SPLIT, **args),
        ("rank", SINGLE): lambda: selectors.product_rank(category=SINGLE, **args),
        ("neighbours", SPLIT): lambda: selectors.product_neighbors(category=SPLIT, n=5, **args),
        ("neighbours", SINGLE): lambda: selectors.product_neighbors(category=SINGLE, n=5, **args),
        ("top", SPLIT): lambda: selectors.board_top(
            category=SPLIT, window=WINDOW, metric="units", limit=100, offset=0
        ),
        ("deep page", SPLIT): lambda: selectors.board_top(
            category=SPLIT, window=WINDOW, metric="units", limit=50, offset=150
        ),
    }
    for answer in reads.values():  # each script known to every node (a node sent it once)
        answer()
    trips = {}
    for read, answer in reads.items():
        memory.forget_all("answers")
        counted = RedisRoundTrips(monkeypatch)
        # when
        answer()
        trips[read] = counted.count
        monkeypatch.undo()
    # then (a read that names products, forgetting the names with the answers, reads them from
    # Redis's copy in one more round trip; a whole board's neighbours on one server, and a split
    # board's anywhere, in their own calls)
    split, names = 2 if store.clustered() else 1, 1
    assert trips == {
        ("rank", SPLIT): split,
        ("rank", SINGLE): 1,
        ("neighbours", SPLIT): split,
        ("neighbours", SINGLE): 1 + names if store.clustered() else 1,
        ("top", SPLIT): 1 + names,
        # each part's window in one pipeline, then the other metric of the page's rows in another,
        # as a whole board's deep page
        ("deep page", SPLIT): 2 + names,
    }


def test_each_part_holds_the_products_its_hash_names(redis_client, catalogue):
    """The parts are on shards of their own, and a product is in exactly one of them."""
    board = {f"p{i}": (1 + i % 3, 100) for i in range(50)}
    layout = _write(redis_client, board, 3)
    shards = layout.shards_of(SPLIT)
    assert len(set(shards)) == 3 and layout.shard_of(SINGLE) not in shards
    for k, (shard, part) in enumerate(zip(shards, layout.boards_of(SPLIT), strict=True)):
        held = store.board_read_all(store.board_key(1, shard, WINDOW, "units", part))
        assert {pid for pid, _ in held} == {pid for pid in board if part_index(pid, 3) == k}


@pytest.mark.django_db(transaction=True)
def test_a_split_board_lost_in_redis_is_rebuilt_by_the_next_tick_and_merged_again(redis_client, settings):
    """Every key deleted, then a tick: each part comes back from its buckets, and the merged board
    reads as before."""
    from .rankings_helpers import Shop

    settings.RANKINGS = {**settings.RANKINGS, "SPLIT": "all:3"}
    shop = Shop()
    shop.send(*[shop.sale(f"p{i}", qty=1 + i % 4) for i in range(40)])
    shop.tick()
    before = selectors.board_top(category="all", window="7d", metric="units", limit=50, offset=0)
    assert before.total == 40
    redis_client.delete(*run_keys(redis_client))
    memory.forget_all("answers")
    store.reset_clients()
    report = shop.tick()
    assert report.rebuilt_shards == rankings_settings.SHARDS + 3
    after = selectors.board_top(category="all", window="7d", metric="units", limit=50, offset=0)
    assert (after.items, after.total) == (before.items, before.total)
    shop.assert_exact()


def test_a_deep_page_reads_a_window_around_each_parts_place_not_every_member_before_it(
    redis_client, catalogue, monkeypatch
):
    """Ranks 2,001-2,050 of 3,000 members in 3 parts: each part is read about its place (the hash
    spreads the members evenly), and the page is the one sorted set's."""
    board = {f"p{i:04}": (1 + i % 7, 1 + i % 5) for i in range(3000)}
    _write(redis_client, board, 3)
    reads = []
    for name in ("parts_ranges", "parts_rows"):
        real = getattr(store, name)
        monkeypatch.setattr(store, name, lambda real=real, **kw: reads.append(kw["ranges"]) or real(**kw))
    args = {"window": WINDOW, "metric": "units", "limit": 50, "offset": 2000}
    split = selectors.board_top(category=SPLIT, **args)
    assert len(reads) == 1, "the windows did not hold the page"
    # each part from 16 + 2·√2000 ranks before its share of the members before the page to as many
    # past its share of the page: 2 · (16 + 2 · 44) + ⌈50 / 3⌉ ranks (docs/architecture.md's bound)
    assert all(stop - start + 1 <= 225 for _, _, start, stop in reads[0])
    _same(split, selectors.board_top(category=SINGLE, **args))


@pytest.mark.parametrize("protocol", [2, 3])
def test_a_deep_page_is_the_one_sorted_sets_whichever_protocol_redis_speaks(
    redis_client, catalogue, settings, request, protocol
):
    """The parts' windows are read as Redis sends them: their scores as texts (RESP2) or doubles
    (RESP3), units and revenue up to 2^53 - 1 alike."""
    board = {f"p{i:04}": (1 + i % 7, 2**53 - 1 - i % 11 * 2**40) for i in range(600)}
    _write(redis_client, board, 3)
    request.addfinalizer(store.reset_clients)
    settings.REDIS_URL += f"{'&' if '?' in settings.REDIS_URL else '?'}protocol={protocol}"
    store.reset_clients()
    for metric in ("units", "revenue"):
        args = {"window": WINDOW, "metric": metric, "limit": 50, "offset": 300}
        split = selectors.board_top(category=SPLIT, **args)
        assert len(split.items) == 50
        _same(split, selectors.board_top(category=SINGLE, **args))


@pytest.mark.parametrize("category", [SPLIT, SINGLE])
def test_neighbours_of_random_products_of_a_small_board_are_read_from_its_copies_with_no_round_trip(
    redis_client, catalogue, monkeypatch, category
):
    """A reader of many products' neighbours, as one of their ranks, is answered from copies of the
    board (of each of its parts) once it has them: no Redis round trip but the copies' checks, and
    the answers Redis gives."""
    from .redis_round_trips import RedisRoundTrips

    # given: 300 products with ties, split 3 ways under SPLIT, whole under SINGLE
    _write(redis_client, {f"p{i:03}": (1 + i % 9, 100 + i) for i in range(300)}, 3)
    products = [f"p{i:03}" for i in range(0, 300, 7)] + ["nobody"]
    args = {"window": WINDOW, "metric": "units", "n": 5}
    direct = [selectors.product_neighbors(product_id=p, category=category, **args) for p in products]
    memory.forget_all("answers")
    monkeypatch.setattr(board_reader, "BOARD_COPY_AFTER", 1)
    # within the test, no copy checked again and the active version not read again, however slow
    monkeypatch.setattr(answers, "FRESH_SECONDS", 60.0)
    monkeypatch.setattr("rankings.engine.store.versions.ACTIVE_VERSION_TTL", 60.0)
    selectors.product_neighbors(product_id="p150", category=category, **args)  # the copies made
    catalogue_reads.product_names([f"p{i:03}" for i in range(300)])  # and the names remembered
    counted = RedisRoundTrips(monkeypatch)
    # when
    copied = [selectors.product_neighbors(product_id=p, category=category, **args) for p in products]
    # then
    assert board_reader._board_copies, "no board was copied"
    assert counted.count == 0
    assert copied == direct
    assert all(a.items for a in direct[:-1]) and direct[-1].items == ()
    assert {len(a.items) for a in direct[:-1]} >= {11}
