"""Which open transactions hold back a claim by transaction id (`--only horizon`, not in CI).

The claim tried in `--only shape` takes the rows whose writing transaction's id lies in
`[cursor, horizon)` and moves the cursor to the horizon. Its horizon there is the snapshot's
xmin, the oldest transaction still running; but transaction ids belong to the whole PostgreSQL
server, so a transaction open in any other database of it (another application's, another test
run's) holds every claim back for as long as it stays open. The horizon tried here is this
database's own: the oldest id among the transactions running in this database
(`pg_stat_activity.backend_xid`) and its prepared ones, or one past the newest ended transaction's
id when none runs, read in one statement before the claim's read, which takes a later snapshot
(docs/architecture.md, "Ingest: the next shape, tried").

Each run, for each horizon: WRITERS threads store rows, each in a transaction held open a random
while before it commits (one in ten rolls back), so that commits come out of transaction-id order,
while a claimer claims every CLAIM_EVERY seconds into a table keyed by the row (a row taken twice
breaks the key) and a transaction holding an id stays open in another database (`postgres`). After
WRITING seconds that transaction ends and the claimer drains. Reported: how much of what committed
the claims took while the other database's transaction was open, how long a committed row waited
to be claimed then, and what one horizon statement costs; the run fails if a committed row was not
claimed or a rolled back one was.

    python -m bench --only horizon
"""

import itertools
import random
import statistics
import threading
import time

import psycopg

from bench import harness

WRITERS = 4
WRITING = 4.0  # seconds of writers and of the other database's open transaction
CLAIM_EVERY = 0.02
HELD = 0.03  # the longest a writer keeps its transaction open before it commits
ROWS = 50  # rows a writer's transaction stores

_SCHEMA = """
DROP SCHEMA IF EXISTS horizon_trial CASCADE;
CREATE SCHEMA horizon_trial;
CREATE TABLE horizon_trial.event (
    id bigint PRIMARY KEY, xid bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint
);
CREATE INDEX ON horizon_trial.event (xid);
CREATE TABLE horizon_trial.claimed (id bigint PRIMARY KEY, at double precision NOT NULL);
CREATE TABLE horizon_trial.cursor (xid bigint NOT NULL);
INSERT INTO horizon_trial.cursor SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint;

-- This database's horizon. Its statements run in order, each with a snapshot of its own: first one
-- past the newest ended transaction's id (an id below it was handed out before that transaction
-- ended), then the running transactions (a transaction with a lower id that is not among them has
-- ended by then, or is prepared), then the prepared ones (one prepared after the running were read
-- is listed by then, unless it has ended). The statistics copied earlier in the transaction are
-- dropped first. backend_xid is 32 bits, and a running transaction's id may lie above `next`: its
-- full id is `next` moved by the signed 32-bit distance between the two. The claim's statement must
-- take a snapshot after all this, which only READ COMMITTED gives.
CREATE FUNCTION horizon_trial.horizon() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    next bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
    running bigint;
    prepared bigint;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE 'a claim by transaction id needs READ COMMITTED, not %', current_setting('transaction_isolation');
    END IF;
    PERFORM pg_stat_clear_snapshot();
    SELECT min(next + ((backend_xid::text::bigint - next) % 4294967296 + 6442450944) % 4294967296 - 2147483648)
    INTO running FROM pg_stat_activity WHERE datname = current_database() AND backend_xid IS NOT NULL;
    SELECT min(next + ((transaction::text::bigint - next) % 4294967296 + 6442450944) % 4294967296 - 2147483648)
    INTO prepared FROM pg_prepared_xacts WHERE database = current_database();
    RETURN least(next, running, prepared);
END $$;
"""

HORIZONS = {
    "the server's oldest transaction (snapshot xmin)": "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
    "this database's oldest transaction": "SELECT horizon_trial.horizon()",
}

# The claim, a statement after the horizon's: every row below the horizon it sees, the cursor moved.
_CLAIM = """
WITH claimed AS (
    INSERT INTO horizon_trial.claimed
    SELECT id, %(at)s FROM horizon_trial.event
    WHERE xid >= (SELECT xid FROM horizon_trial.cursor) AND xid < %(horizon)s
    RETURNING id
)
UPDATE horizon_trial.cursor SET xid = greatest(xid, %(horizon)s)
"""


def _url(database: str) -> str:
    """The benchmark's PostgreSQL server, as Django reaches it (DATABASE_URL), with another database."""
    from django.db import connection

    settings = connection.settings_dict
    where = {"host": settings["HOST"], "port": settings["PORT"], "user": settings["USER"]}
    return psycopg.conninfo.make_conninfo(dbname=database, **{k: v for k, v in where.items() if v})


class _Writers:
    def __init__(self):
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.committed: dict[int, float] = {}  # id -> when its commit returned
        self.rolled_back: set[int] = set()
        self.stop = threading.Event()

    def write(self, seed: int) -> None:
        rng = random.Random(seed)
        with psycopg.connect(_url(harness.BENCH_DATABASE)) as conn:
            while not self.stop.is_set():
                with self.lock:
                    ids = [next(self.ids) for _ in range(ROWS)]
                with conn.cursor() as cursor:
                    cursor.execute("INSERT INTO horizon_trial.event (id) SELECT unnest(%s::bigint[])", [ids])
                time.sleep(rng.uniform(0, HELD))  # the transaction holds its id, uncommitted
                if rng.random() < 0.1:
                    conn.rollback()
                    self.rolled_back.update(ids)
                else:
                    conn.commit()
                    at = time.time()
                    self.committed.update(dict.fromkeys(ids, at))


def _once(horizon_sql: str, seed: int) -> dict[str, float]:
    with psycopg.connect(_url(harness.BENCH_DATABASE), autocommit=True) as conn:
        conn.execute(_SCHEMA)
    writers = _Writers()
    other = psycopg.connect(_url("postgres"))
    other.execute("SELECT pg_current_xact_id()")  # holds an id, in another database, until it ends
    threads = [threading.Thread(target=writers.write, args=(seed * 100 + k,)) for k in range(WRITERS)]
    horizon_seconds: list[float] = []
    with psycopg.connect(_url(harness.BENCH_DATABASE)) as claimer:

        def claim() -> None:
            started = time.perf_counter()
            (horizon,) = claimer.execute(horizon_sql).fetchone()
            horizon_seconds.append(time.perf_counter() - started)
            claimer.execute(_CLAIM, {"horizon": horizon, "at": time.time()})
            claimer.commit()

        for thread in threads:
            thread.start()
        writing_ends = time.time() + WRITING
        while time.time() < writing_ends:
            claim()
            time.sleep(CLAIM_EVERY)
        writers.stop.set()
        for thread in threads:
            thread.join()
        while_open = claimer.execute("SELECT id, at FROM horizon_trial.claimed").fetchall()
        committed_then = len(writers.committed)
        other.rollback()  # answered once the transaction has ended
        other.close()
        claim()
        claimed = dict(claimer.execute("SELECT id, at FROM horizon_trial.claimed").fetchall())
    if set(claimed) != set(writers.committed):
        raise RuntimeError(
            f"claims skipped {len(set(writers.committed) - set(claimed))} committed rows and took"
            f" {len(set(claimed) & writers.rolled_back)} rolled back"
        )
    waits = sorted(at - writers.committed[row] for row, at in while_open)
    return {
        "taken": len(while_open) / committed_then,
        "rows": committed_then,
        "wait p50": statistics.median(waits) if waits else float("nan"),
        "wait p99": harness.percentile(waits, 99) if waits else float("nan"),
        "horizon": statistics.median(horizon_seconds),
    }


def run(table: harness.Table, runs: int = 3) -> harness.Table:
    figures: dict[tuple[str, str], list[float]] = {}
    try:
        for run_number in range(runs):
            for name, sql in HORIZONS.items():
                for figure, value in _once(sql, run_number).items():
                    figures.setdefault((name, figure), []).append(value)
    finally:
        with psycopg.connect(_url(harness.BENCH_DATABASE), autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS horizon_trial CASCADE")
    median = {key: statistics.median(values) for key, values in figures.items()}
    for name in HORIZONS:
        waits = (
            f"a row claimed {median[(name, 'wait p50')] * 1000:.0f} ms after its commit (p50),"
            f" {median[(name, 'wait p99')] * 1000:.0f} ms (p99)"
            if median[(name, "taken")]
            else "no row claimed"
        )
        table.add(
            f"claim by transaction id, horizon: {name}; another database's transaction open",
            f"{median[(name, 'taken')]:.0%} of {median[(name, 'rows')]:,.0f} committed rows claimed meanwhile",
            note=f"{waits}; the horizon's statement {median[(name, 'horizon')] * 1000:.2f} ms;"
            " after it ended every committed row was claimed once, none rolled back",
        )
    return table
