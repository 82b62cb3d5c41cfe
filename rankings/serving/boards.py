"""A board's ranks: a page of it (top-N from an offset), and the heads of many boards at once."""

from rankings.conf import ENGAGEMENT_METRICS
from rankings.engine import store
from rankings.engine.instants import instant
from rankings.serving import board_reader
from rankings.serving.answers import Board, NotFound, RankedProduct, figures, fresh, reading, served
from rankings.serving.catalogue_reads import product_names
from rankings.serving.categories import categories_names, category_name
from rankings.serving.layouts import layout_of
from rankings.serving.rank_then import ranks_then, ranks_then_prefetch, then_of


def items_of(
    rows,
    first_rank: int,
    metric: str,
    names: dict[str, str] | None = None,
    then: dict[str, int] | None = None,
    sales: dict | None = None,
) -> tuple[RankedProduct, ...]:
    if names is None:
        names = product_names([product_id for product_id, _, _ in rows])
    then = then or {}
    sales = sales or {}
    return tuple(
        RankedProduct(
            first_rank + i,
            pid,
            names.get(pid, pid),
            *figures(metric, score, other, sales.get(pid)),
            rank_then=then.get(pid),
        )
        for i, (pid, score, other) in enumerate(rows)
    )


def board_answer(
    category: str,
    window: str,
    metric: str,
    offset: int,
    found: store.BoardSlice,
    names: dict | None = None,
    sales: dict | None = None,
) -> Board:
    as_of = instant(found.as_of)
    then = ranks_then(category=category, window=window, metric=metric, as_of=as_of)
    return Board(
        category=category,
        window=window,
        metric=metric,
        as_of=as_of,
        total=found.total,
        items=items_of(found.rows, offset + 1, metric, names, then=then, sales=sales),
        then=then_of(as_of) if then is not None else None,
    )


@reading
def board_top(*, category: str, window: str, metric: str, limit: int, offset: int) -> Board:
    """The products ranked offset+1 … offset+limit on a board."""
    category_name(category)
    return served(
        top_key(category, window, metric, limit, offset),
        lambda: _board_top(category=category, window=window, metric=metric, limit=limit, offset=offset),
    )


def top_key(category: str, window: str, metric: str, limit: int, offset: int) -> tuple:
    return ("top", category, window, metric, limit, offset)


def _board_top(*, category: str, window: str, metric: str, limit: int, offset: int) -> Board:
    version = store.served_version()
    layout = layout_of(version)
    found = board_reader.board_slice(
        version,
        layout,
        category=category,
        window=window,
        metric=metric,
        start=offset,
        stop=offset + limit - 1,
    )
    (sales,) = board_reader.sales_beside(
        version, layout, window, metric, [(category, [pid for pid, _, _ in found.rows])]
    )
    return board_answer(category, window, metric, offset, found, sales=sales)


@reading
def boards_top_many(*, limits: dict[str, int], window: str, metric: str) -> dict[str, Board]:
    """The first limits[c] products of each category c's board, each as board_top would answer.

    One Redis round trip for every board (their top-100 blobs, in one
    pipeline) and one catalogue query for all the names, so a hundred
    categories' leaders cost what one does. Answers are remembered under
    board_top's keys, fresh or stale alike.
    """
    known = categories_names(limits)
    for category in limits:
        if category not in known:
            raise NotFound(f"unknown category '{category}'")
    keys = {category: top_key(category, window, metric, limit, 0) for category, limit in limits.items()}
    wanted = [category for category, key in keys.items() if fresh(key) is None]
    heads = board_reader.heads_read(wanted, limits=limits, window=window, metric=metric)
    names = product_names({pid for found in (heads or {}).values() if found for pid, _, _ in found.rows})
    ranks_then_prefetch(
        [(c, window, metric, instant(found.as_of)) for c, found in (heads or {}).items() if found]
    )

    def answer(category: str) -> Board:
        if heads is None and category in wanted:
            raise store.Unreachable("the boards could not be read")
        found = (heads or {}).get(category)
        if found is None or metric in ENGAGEMENT_METRICS:
            # fresh a moment ago and no longer, or a blob to rebuild, or sales to read beside: read it alone
            return _board_top(
                category=category, window=window, metric=metric, limit=limits[category], offset=0
            )
        return board_answer(category, window, metric, 0, found, names)

    return {category: served(key, lambda c=category: answer(c)) for category, key in keys.items()}
