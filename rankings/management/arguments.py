"""Argument types shared by the management commands."""

import argparse
import datetime as dt


def instant(value: str) -> dt.datetime:
    """An ISO-8601 instant with a UTC offset (a naive time would be ambiguous)."""
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 instant: {value!r}") from error
    if parsed.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{value!r} has no UTC offset; write e.g. 2026-10-11T10:00:00Z")
    return parsed
