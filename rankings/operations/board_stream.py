"""A rebuild's aggregate, streamed from PostgreSQL into a version's boards in Redis.

PostgreSQL sends the rows of a GROUP BY (category, product id, a metric pair's
sums of each window) as it finishes them, a few thousand at a time (psycopg's
chunked streaming); each row is put on its boards of the new layout and, a
pipeline's worth at a time, written into temporary keys (store.BoardsLoad) by
a writer thread while the next rows are read. Python holds at most two such
batches per aggregate, and the aggregates of two connections run side by side,
so PostgreSQL's reading overlaps Redis's writing.
"""

from collections.abc import Iterable, Sequence
from concurrent.futures import Executor, Future

from rankings.engine import store
from rankings.engine.shards import Layout
from rankings.engine.windows import Window

# Rows streamed from PostgreSQL at a time.
STREAM_ROWS = 5_000
# Rows put on boards before they are written to Redis in one pipeline: a few hundred
# thousand members at most, small next to the boards of a large shop.
WRITE_ROWS = 25_000


class BoardStream:
    """Puts aggregate rows on the boards of the `target` layout, positive scores only, for the categories
    of the active layout's `wanted` shards; `owed`, (category, product id) -> sums, is taken off first
    (what the shards have not claimed yet). Batches are written on `writer`, one at a time.
    Not shared between threads: one per aggregate."""

    def __init__(
        self,
        load: store.BoardsLoad,
        writer: Executor,
        *,
        metrics: tuple[str, str],
        windows: list[Window],
        wanted: set[int],
        live: Layout,
        target: Layout,
        owed: dict[tuple[str, str], list[int]],
    ):
        self.load, self.writer = load, writer
        self._writing: Future | None = None
        self.names = [(w.name, metric) for w in windows for metric in metrics]
        self.wanted, self.live, self.target, self.owed = wanted, live, target, owed
        # A category split in either layout: its sales are placed product by product (split.py).
        self.split = live.split.keys() | target.split.keys()
        # category (not split) -> its boards, or None when no wanted shard has it
        self._routes: dict[str, list | None] = {}
        # board (category or part) of the target layout -> its (members, scores) per name
        self._boards: dict[str, list[tuple[list[str], list[int]]]] = {}

    def _route(self, category: str, product_id: str) -> list | None:
        if category in self.split:
            if self.live.shard_of(self.live.board_of(category, product_id)) not in self.wanted:
                return None
            return self._board(self.target.board_of(category, product_id))
        if category not in self._routes:
            wanted = self.live.shard_of(category) in self.wanted
            self._routes[category] = self._board(category) if wanted else None
        return self._routes[category]

    def _board(self, board: str) -> list[tuple[list[str], list[int]]]:
        if board not in self._boards:
            self._boards[board] = [([], []) for _ in self.names]
        return self._boards[board]

    def take(self, rows: Iterable[Sequence]) -> None:
        """Put every row (category, product id, sums in the order of `names`) on its boards, writing
        them to Redis every WRITE_ROWS rows and once more at the end (see written)."""
        owed = self.owed
        for n, (category, product_id, *values) in enumerate(rows, 1):
            unclaimed = owed.get((category, product_id))
            if unclaimed is not None:
                values = [a - b for a, b in zip(values, unclaimed, strict=True)]
            boards = self._route(category, product_id)
            if boards is not None:
                for (members, scores), value in zip(boards, values, strict=True):
                    if value > 0:
                        members.append(product_id)
                        scores.append(value)
            if n % WRITE_ROWS == 0:
                self._write()
        self._write()

    def _write(self) -> None:
        """Hand the boards' members so far to the writer (once it wrote the previous batch); start anew."""
        pieces = []
        for board, lists in self._boards.items():
            shard = self.target.shard_of(board)
            for (window, metric), (members, scores) in zip(self.names, lists, strict=True):
                if members:
                    pieces.append((shard, window, metric, board, members, scores))
        self._routes, self._boards = {}, {}
        self.written()
        self._writing = self.writer.submit(self.load.write, pieces)

    def written(self) -> None:
        """Wait until the writer wrote what it was given; raise what it could not write."""
        if self._writing is not None:
            self._writing.result()  # re-raises, here, what failed in the writer
            self._writing = None


def stream(connection, query: str, params: dict) -> Iterable[tuple]:
    """The rows of `query` on a psycopg connection, as PostgreSQL sends them (parallel plans allowed)."""
    with connection.cursor() as cursor:
        yield from cursor.stream(query, params, size=STREAM_ROWS)
