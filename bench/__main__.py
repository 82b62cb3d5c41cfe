"""`make bench`: every benchmark, against a database, Redis database and key prefix of its own; one table at the end.

python -m bench [--runs 3] [--only ingest|engine|ticks|read|rebuild|cluster|reshard|flash|engage|tree|moves|split|history|scale|metrics|alerts|shape|ladder|horizon|small_boards|rollup|halves]

`history` (a rebuild's hourly history at up to 20,000 categories, minutes), `scale` (ten million
products in a board, a million categories), `metrics` (one scrape of /metrics at 20,000
categories), `alerts` (judging 100,000 rank alerts at 20,000 categories, and their delivery) and
`shape` (the storage shape ingest would take next, tried beside today's), `ladder` (what each
difference between the ingest's floor and a stored sale costs), `horizon` (which open
transactions hold back a claim by transaction id), `small_boards` (what a tick over a million
categories costs Redis, as the engine writes it and as one hash a category would), `rollup` (a
rebuild that reads the sales' sums by product, list and hour, beside one that reads the raw sales)
and `halves` (one client's batches of sales stored in two halves side by side, beside whole) run
only when asked for.
"""

import argparse

from bench import harness

# Every group in the order `make bench` runs them; `history`, `scale`, `metrics`, `alerts`, `shape`,
# `ladder`, `horizon`, `small_boards`, `rollup` and `halves` run only when asked for.
GROUPS = [
    "ingest",
    "engine",
    "ticks",
    "read",
    "rebuild",
    "cluster",
    "reshard",
    "flash",
    "engage",
    "tree",
    "moves",
    "split",
]


def main() -> None:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; the median is reported")
    parser.add_argument(
        "--only",
        choices=[
            *GROUPS,
            "history",
            "scale",
            "metrics",
            "alerts",
            "shape",
            "ladder",
            "horizon",
            "small_boards",
            "rollup",
            "halves",
        ],
        help="run one group",
    )
    args = parser.parse_args()
    harness.setup()
    table = harness.Table()
    groups = [args.only] if args.only else GROUPS
    for group in groups:
        module = __import__(f"bench.bench_{group}", fromlist=["main"])
        module.run(table, runs=args.runs)
    print()
    print(table.render())


if __name__ == "__main__":
    main()
