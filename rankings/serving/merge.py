"""Reads of a split board: its parts merged exactly, with the answers one sorted set would give.

A split category's boards are kept as parts on shards of their own (rankings.engine.split); every
product is in exactly one part. So:

- a page of ranks is a k-way merge of the parts' heads in the board's order (score descending,
  then product id ascending by bytes): the first 100 ranks from the parts' top-100 blobs (each
  part's first 100 hold every member of the merged first 100 it contributes), deeper pages from a
  window of each part around its expected place (offset / K, give or take a few times
  sqrt(offset)), checked to hold the page exactly, else from each part's place found by halves;
- the size is the sum of the parts' sizes;
- a product's rank is 1 + the members ordered before it in every part: its own rank in its part,
  plus, in each other part, the members with a higher score or the same score and a smaller id
  (store.parts_before; ZCOUNT on the score alone would miscount the ties);
- its neighbours are merged from each part's members just before and after that place, read with
  the product's rank in its own part and with the counts in the others;
- asOf is the oldest of the parts' shards' instants (each part is exact as of its own), unknown
  when one part's is.

Each read costs one or two round trips, on one server or a Redis Cluster alike (the parts' calls
in one pipeline, which a cluster sends to each node at once), and
O(K × (log n + limit)) work in Redis, K the number of parts; a rank or the neighbours one on one
server (one call reads every part) and two on a cluster (the counts in the other parts need the
product's score, which only its own part holds, and no call reaches two parts' slots); a deep page
two (the windows, then the other metric of the page's rows, as a whole board's deep page reads it)
and O(K × sqrt(offset) + limit), and when the parts are very uneven O(K log offset) round trips more
and O(K² log² n log offset) work (offset being at most 10,000); the thresholds, such a page of one
rank for each of 1,000 and 10,000.
"""

import heapq
import math

from rankings.conf import other_metric
from rankings.engine import store
from rankings.engine.shards import Layout


def _order(row: tuple[str, int, int]) -> tuple[int, bytes]:
    return (-row[1], row[0].encode())


def _as_of(found) -> float | None:
    instants = [f.as_of for f in found]
    return min(instants) if instants and all(instants) else None


def _parts(layout: Layout, category: str) -> list[tuple[int, str]]:
    return [(layout.shard_of(part), part) for part in layout.boards_of(category)]


def _merged(slices: list[store.BoardSlice]) -> list[tuple[int, tuple[str, int, int]]]:
    """Every row of the slices in the board's order, each with the index of its part."""
    tagged = [[(i, row) for row in found.rows] for i, found in enumerate(slices)]
    return list(heapq.merge(*tagged, key=lambda item: _order(item[1])))


def board_slice(
    *, version: int, layout: Layout, window: str, metric: str, category: str, start: int, stop: int
) -> store.BoardSlice:
    """Ranks start..stop (0-based, inclusive) of a split board, with both metrics."""
    parts = _parts(layout, category)
    if stop < store.BLOB_SIZE:
        heads = store.board_heads(
            version=version, boards=[(shard, window, metric, part, stop + 1) for shard, part in parts]
        )
        missing = [i for i, found in enumerate(heads) if found is None]
        if missing:  # a blob being rewritten after a rebuild: those parts from their boards
            read = store.parts_rows(
                version=version, window=window, metric=metric, ranges=[(*parts[i], 0, stop) for i in missing]
            )
            figured = _figured(
                version=version,
                window=window,
                metric=metric,
                parts=[parts[i] for i in missing],
                rows=_tagged(read),
            )
            for k, (i, found) in enumerate(zip(missing, read, strict=True)):
                heads[i] = store.BoardSlice(
                    as_of=found.as_of, total=found.total, rows=[row for row, part in figured if part == k]
                )
        rows = [row for _, row in _merged(heads)[start : stop + 1]]
        return store.BoardSlice(as_of=_as_of(heads), total=sum(f.total for f in heads), rows=rows)
    rows, read = _deep_page(
        version=version, window=window, metric=metric, parts=parts, start=start, stop=stop
    )
    return store.BoardSlice(as_of=_as_of(read), total=sum(f.total for f in read), rows=rows)


def _tagged(read: list[store.PartRows]) -> list[tuple[int, bytes, int]]:
    """The rows of the parts' reads, each with the index of its part, as a merge orders them (score,
    then member: a member is in one part only, so the index is never compared)."""
    return [(score, member, i) for i, found in enumerate(read) for score, member in found.rows]


def _figured(
    *,
    version: int,
    window: str,
    metric: str,
    parts: list[tuple[int, str]],
    rows: list[tuple[int, bytes, int]],
) -> list[tuple[tuple[str, int, int], int]]:
    """Each of `rows` (_tagged, of `parts`) as a BoardSlice's row (product id, this metric's score,
    the other's), with the index of its part: the other metric read for these rows only, in one
    round trip, as a whole board's deep page reads it (store.board_slice)."""
    ids = [member.decode() for _, member, _ in rows]
    wanted: list[list[str]] = [[] for _ in parts]
    for pid, (_, _, i) in zip(ids, rows, strict=True):
        wanted[i].append(pid)
    other = other_metric(metric)
    others = store.members_scores(
        version=version,
        lookups=[
            (shard, window, other, part, members)
            for (shard, part), members in zip(parts, wanted, strict=True)
        ],
    )
    return [((pid, -score, others[i][pid]), i) for pid, (score, _, i) in zip(ids, rows, strict=True)]


def _deep_page(
    *, version: int, window: str, metric: str, parts: list[tuple[int, str]], start: int, stop: int
) -> tuple[list[tuple[str, int, int]], list[store.PartRows]]:
    """Ranks start..stop of a split board with both metrics, and the parts' reads (their sizes and
    instants).

    A product lands in a part by a hash, so about start/K of the members before `start` lie in each
    part, and about 1/K of the page: each part is read from _deep_slack(start) ranks before that
    guess to as many past its share of the page (store.parts_rows: one round trip), and the merge
    of those windows is checked to hold the page exactly (see _window_holds). Should it not (parts
    far from even), each part's place is found by halves (_places) and the page read from there:
    never every member before the page. The windows are merged as Redis sent them (tuples that
    order as the board does, sorted in C), and only the page's rows are turned into ids and given
    their other metric (_figured: a second round trip; one script call a part that read every
    window's other metric too took 3.4-3.5 ms a page, against 1.7-2.0 ms)."""
    guess, slack = start // len(parts), _deep_slack(start)
    share = -(-(stop - start + 1) // len(parts))  # a part's share of the page, as even as the hash
    ranges = [(*p, max(0, guess - slack), guess + slack + share - 1) for p in parts]
    read = store.parts_rows(version=version, window=window, metric=metric, ranges=ranges)
    total = sum(found.total for found in read)
    if start >= total:
        return [], read
    merged = sorted(_tagged(read))
    first = start - sum(low for _, _, low, _ in ranges)
    page = merged[first : first + stop - start + 1] if first >= 0 else []
    if not (first >= 0 and _window_holds(read, ranges, page, want=stop - start + 1)):
        places = _places(version=version, window=window, metric=metric, parts=parts, rank=start)
        ranges = [(*p, place, place + stop - start) for p, place in zip(parts, places, strict=True)]
        read = store.parts_rows(version=version, window=window, metric=metric, ranges=ranges)
        page = sorted(_tagged(read))[: stop - start + 1]
    rows = _figured(version=version, window=window, metric=metric, parts=parts, rows=page)
    return [row for row, _ in rows], read


def _places(*, version: int, window: str, metric: str, parts: list[tuple[int, str]], rank: int) -> list[int]:
    """Where the merged board's rank `rank` (0-based) begins in each part: how many of its members
    are ordered before it. Found by halves in every part at once: a member's merged rank is its
    place in its own part plus the members ordered before it in the others (store.parts_before), so
    each step is one read of a member per part and one count per part, and there are at most
    log2(rank) steps: O(K² log² n × log rank) work, never a read of the members before `rank`. The
    parts' sizes bound no search: read apart from the members, a tick between could have changed
    them (a probe past a part's end finds no member, and its place is before it)."""
    bounds = [[0, rank] for _ in parts]
    while any(low < high for low, high in bounds):
        probes = [(low + high) // 2 if low < high else None for low, high in bounds]
        read = store.parts_ranges(
            version=version,
            window=window,
            metric=metric,
            ranges=[
                (*p, -1, -2) if at is None else (*p, at, at) for p, at in zip(parts, probes, strict=True)
            ],
        )
        for i, (at, found) in enumerate(zip(probes, read, strict=True)):
            if at is None:
                continue
            if not found.rows:  # the part shrank under a tick: its place is before the probe
                bounds[i][1] = at
                continue
            pid, score, _ = found.rows[0]
            others = [p for k, p in enumerate(parts) if k != i]
            before = store.parts_before(
                version=version, window=window, metric=metric, parts=others, score=score, product_id=pid
            )
            if at + sum(b.before for b in before) < rank:
                bounds[i][0] = at + 1
            else:
                bounds[i][1] = at
    return [low for low, _ in bounds]


def _deep_slack(start: int) -> int:
    """Ranks read either side of a part's guessed place: the hash spreads the members before
    `start` over the parts, a part's share of them spread by at most sqrt(start) / 2 (binomial);
    this is four times that and 16 more, so that a window misses, and the page is found by halves,
    about once in ten thousand pages a part, or less. (Six times and 32 more, with the whole page past
    the guess, read three fifths more rows: a deep page of the demo's `all` split 3 ways took 4.7
    ms in process, against 2.8 ms.)"""
    return 16 + 2 * math.isqrt(start)


def _window_holds(
    read: list[store.PartRows], ranges: list[tuple[int, str, int, int]], page: list, *, want: int
) -> bool:
    """Whether `page`, taken from the merge of the parts' windows (part i read in ranks
    ranges[i]'s start to stop), is exactly the merged board's ranks there: every member of every
    part ordered between the page's first and last rows was read (no unread member below a window's
    first row comes after the page's first, none past a window's last row comes before the page's
    last), and a short page ends with every part read to its end. Then the page's first row is at
    rank the sum of the starts + its place in the merge, as the caller took it. A part was read to
    its end when its window came back short: told by the read itself, not by the part's size, read
    by another command (a tick between the two could have changed it). Rows are store.PartRows's,
    which order as the board does."""
    if not page:
        return False
    first, last = page[0][:2], page[-1][:2]
    for found, (_, _, low, high) in zip(read, ranges, strict=True):
        rows = found.rows
        if low > 0 and (not rows or rows[0] > first):
            return False
        complete = len(rows) < high - low + 1
        if not complete and (len(page) < want or not rows or rows[-1] < last):
            return False
    return True


def _standing(
    *, version: int, layout: Layout, window: str, metric: str, category: str, product_id: str, n: int
) -> tuple[store.MemberRank, store.MemberAround, list[store.PartAround], int]:
    """The product's standing on the split board (store.split_around: its own part's read with
    the n members either side of it there, each other part's count of the members ordered before
    it with the n either side of that place), the reads themselves and the index of its part."""
    parts = _parts(layout, category)
    own = [part for _, part in parts].index(layout.board_of(category, product_id))
    mine, others = store.split_around(
        version=version, window=window, metric=metric, parts=parts, own=own, product_id=product_id, n=n
    )
    found = mine.found
    merged = store.MemberRank(
        as_of=_as_of([found, *(o.before for o in others)]),
        total=found.total + sum(o.before.total for o in others),
        rank=found.rank + sum(o.before.before for o in others) if found.rank is not None else None,
        score=found.score,
        other=found.other,
    )
    return merged, mine, others, own


def member_rank(
    *, version: int, layout: Layout, window: str, metric: str, category: str, product_id: str
) -> store.MemberRank:
    """A product's rank (0-based), scores and the board's size on a split board."""
    found, _, _, _ = _standing(
        version=version,
        layout=layout,
        window=window,
        metric=metric,
        category=category,
        product_id=product_id,
        n=0,
    )
    return found


def member_rank_copied(*, layout: Layout, category: str, product_id: str, copies: list) -> store.MemberRank:
    """member_rank from copies of every part (store.BoardCopy, in the order of the parts), with no
    Redis round trip: the product's rank in its own part's copy, plus the members ordered before
    it in each other's."""
    index = layout.boards_of(category).index(layout.board_of(category, product_id))
    found = copies[index].member(product_id)
    others = [copy for i, copy in enumerate(copies) if i != index]
    return store.MemberRank(
        as_of=_as_of(copies),
        total=sum(copy.total for copy in copies),
        rank=found.rank + sum(c.before(found.score, product_id) for c in others)
        if found.rank is not None
        else None,
        score=found.score,
        other=found.other,
    )


def neighbors(
    *, version: int, layout: Layout, window: str, metric: str, category: str, product_id: str, n: int
) -> tuple[store.MemberRank, int, store.BoardSlice | None, dict[str, str] | None]:
    """The product's standing, the ranks from n above it to n below it (the first's 0-based rank
    and the slice; None when it is not ranked) and what Redis's copies of the names held of them
    (None when it is not ranked): the rows read about its place in every part (_standing), merged,
    and the 2n + 1 around it kept."""
    merged, mine, others, own = _standing(
        version=version,
        layout=layout,
        window=window,
        metric=metric,
        category=category,
        product_id=product_id,
        n=n,
    )
    if merged.rank is None or mine.found.rank is None:
        return merged, 0, None, None
    merged, first, board = _around(merged, own, mine, [(o.before.before, o.start, o.rows) for o in others], n)
    if mine.names is None:
        return merged, first, board, None
    found = mine.names.copy()
    for other in others:
        found.update(other.names)
    named = {m: found[m] for m, _, _ in board.rows if m in found}
    if store.clustered() and len(named) < len(board.rows):
        # A part's copy lacks a name (one a walk has not copied yet): the read names its rows as a
        # whole board's on a cluster, from Redis's shared copy first.
        return merged, first, board, None
    return merged, first, board, named


def neighbors_copied(
    *, layout: Layout, category: str, product_id: str, n: int, copies: list
) -> tuple[store.MemberRank, int, store.BoardSlice | None]:
    """neighbors from copies of every part (store.BoardCopy, in the order of the parts), with no
    Redis round trip: the product's own part's copy gives its rank and the n either side of it
    there; in each other copy, the members ordered before it and the n either side of that place."""
    own = layout.boards_of(category).index(layout.board_of(category, product_id))
    mine = copies[own].around(product_id, n)
    found = mine.found
    others = [copy for i, copy in enumerate(copies) if i != own]
    befores = [copy.before(found.score, product_id) for copy in others] if found.rank is not None else []
    merged = store.MemberRank(
        as_of=_as_of(copies),
        total=sum(copy.total for copy in copies),
        rank=found.rank + sum(befores) if found.rank is not None else None,
        score=found.score,
        other=found.other,
    )
    if merged.rank is None:
        return merged, 0, None
    read = [
        (before, max(0, before - n), copy.rows(before - n, before + n))
        for copy, before in zip(others, befores, strict=True)
    ]
    return _around(merged, own, mine, read, n)


def _around(
    merged: store.MemberRank,
    own: int,
    mine: store.MemberAround,
    others: list[tuple[int, int, list[tuple[str, int, int]]]],
    n: int,
) -> tuple[store.MemberRank, int, store.BoardSlice]:
    """The 2n + 1 ranks about a ranked product, from the rows read about its place in each part:
    its own part's (mine) and each other's (before, start, rows) in order, `before` the members of
    that part ordered before the product, `start` the part's rank of its first row read."""
    # Each part read from `start` on; in it `before` members are ordered before the product (in its
    # own part, its rank there).
    assert mine.found.rank is not None and merged.rank is not None
    read = list(others)
    read.insert(own, (mine.found.rank, mine.start, mine.board.rows))
    tagged = [[(i, row) for row in rows] for i, (_, _, rows) in enumerate(read)]
    rows = [row for _, row in heapq.merge(*tagged, key=lambda item: _order(item[1]))]
    place = sum(before - start for before, start, _ in read)  # the product's place in `rows`
    first = max(0, place - n)
    board = store.BoardSlice(as_of=merged.as_of, total=merged.total, rows=rows[first : place + n + 1])
    return merged, merged.rank - (place - first), board


def ordered_before(
    *, version: int, layout: Layout, window: str, metric: str, category: str, score: int, product_id: str
) -> int:
    """store.ordered_before of a split board: the sum over its parts."""
    read = store.parts_before(
        version=version,
        window=window,
        metric=metric,
        parts=_parts(layout, category),
        score=score,
        product_id=product_id,
    )
    return sum(b.before for b in read)


def thresholds(
    *,
    version: int,
    layout: Layout,
    window: str,
    metric: str,
    category: str,
    ranks: list[int],
    edges: list[int],
) -> store.Thresholds:
    """store.board_thresholds of a split board: the parts' histograms summed, the members at `ranks`
    within the blobs from the merge of the parts' heads, deeper ones each as a page of one rank
    (_deep_page: a window about each part's place, or its place found by halves)."""
    parts = _parts(layout, category)
    histograms = store.parts_histogram(
        version=version, window=window, metric=metric, parts=parts, edges=edges
    )
    total = sum(h.total for h in histograms)
    reads, found = [*histograms], {}
    shallow = [rank for rank in ranks if rank <= min(total, store.BLOB_SIZE)]
    if shallow:
        head = board_slice(
            version=version,
            layout=layout,
            window=window,
            metric=metric,
            category=category,
            start=0,
            stop=max(shallow) - 1,
        )
        reads.append(head)
        found.update({rank: head.rows[rank - 1] for rank in shallow if rank <= len(head.rows)})
    for rank in ranks:
        if store.BLOB_SIZE < rank <= total:
            page, read = _deep_page(
                version=version, window=window, metric=metric, parts=parts, start=rank - 1, stop=rank - 1
            )
            reads.extend(read)
            if page:
                found[rank] = page[0]
    return store.Thresholds(
        as_of=_as_of(reads),
        total=total,
        ranks=[(rank, found[rank][0], found[rank][1]) for rank in ranks if rank in found],
        counts=[sum(counts) for counts in zip(*(h.counts for h in histograms), strict=True)],
    )


def heads(
    *, version: int, layout: Layout, boards: list[tuple[str, str, str, int]]
) -> list[store.BoardSlice | None]:
    """store.board_heads for boards (category, window, metric, n) some of which are split: one round
    trip for them all; a split board's head is merged from its parts' (None if one cannot answer)."""
    flat: list[tuple[int, str, str, str, int]] = []
    spans: list[tuple[int, int, int]] = []
    for category, window, metric, n in boards:
        parts = _parts(layout, category)
        spans.append((len(flat), len(parts), n))
        flat.extend((shard, window, metric, part, n) for shard, part in parts)
    read = store.board_heads(version=version, boards=flat)
    out: list[store.BoardSlice | None] = []
    for first, count, n in spans:
        found = read[first : first + count]
        if count == 1 or any(f is None for f in found):
            out.append(found[0] if count == 1 else None)
            continue
        rows = [row for _, row in _merged(found)[:n]]
        out.append(store.BoardSlice(as_of=_as_of(found), total=sum(f.total for f in found), rows=rows))
    return out
