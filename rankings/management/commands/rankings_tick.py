import argparse
import datetime as dt

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from rankings.conf import rankings_settings
from rankings.engine.shards import ShardCountMismatch, shard_count_checked
from rankings.engine.tick import ClockWentBackwards, tick
from rankings.management.arguments import instant


def refuse_far_future(value: dt.datetime, *, option: str) -> None:
    """A tick far ahead of the wall clock empties every window and blocks later ticks until then."""
    ahead = (value - timezone.now()).total_seconds()
    if ahead > rankings_settings.MAX_FUTURE_SECONDS:
        raise CommandError(
            f"{option} {value.isoformat()} is {ahead:.0f} s ahead of the clock (more than "
            f"{rankings_settings.MAX_FUTURE_SECONDS} s); every later tick would be refused until then. "
            "Pass --allow-future if that is what you mean (replaying history, tests)."
        )


def shard_list(value: str) -> list[int]:
    """Comma-separated shard numbers, e.g. 0,3."""
    try:
        return sorted({int(part) for part in value.split(",")})
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of shard numbers: {value!r}") from error


def refuse_unknown_shards(shards: list[int]) -> None:
    """Every shard named must be one of the active version's."""
    count = shard_count_checked()
    unknown = [shard for shard in shards if not 0 <= shard < count]
    if unknown:
        raise CommandError(f"--shards {unknown} not among the active version's shards 0 to {count - 1}")


class Command(BaseCommand):
    help = (
        "Aggregate pending sales and expire buckets, as of --now (default: the clock), in every shard "
        "or, with --shards, in the shards listed. "
        "A --now more than MAX_FUTURE_SECONDS ahead of the clock is refused without --allow-future. "
        "If a tick ran with a wrong clock (every later tick fails with 'before the last tick'), "
        "run `rankings_clock_reset` to put every shard back at the clock and rebuild its boards."
    )

    def add_arguments(self, parser):
        parser.add_argument("--now", type=instant, help="ISO-8601 instant with offset; may not go backwards")
        parser.add_argument(
            "--allow-future",
            action="store_true",
            help="accept a --now far ahead of the clock (to replay history; undo with rankings_clock_reset)",
        )
        parser.add_argument(
            "--shards",
            type=shard_list,
            help="tick only these shards, e.g. 0,3 (default: every shard of the active version)",
        )

    def handle(self, *args, **options):
        if options["now"] is not None and not options["allow_future"]:
            refuse_far_future(options["now"], option="--now")
        try:
            if options["shards"] is not None:
                refuse_unknown_shards(options["shards"])
            report = tick(now=options["now"], shards=options["shards"])
        except ClockWentBackwards as error:
            raise CommandError(
                f"{error}; if that tick's clock was wrong, see rankings_clock_reset"
            ) from error
        except ShardCountMismatch as error:
            raise CommandError(str(error)) from error
        self.stdout.write(
            f"tick as of {report.as_of.isoformat()}: {report.sales} sales in {report.batches} batches, "
            f"{report.redis_writes} board writes, {report.too_old} too old, "
            f"{report.rebuilt_shards} shards rebuilt, {report.duration_ms:.0f} ms"
            + (f", shards ticked: {report.ticked_shards}" if options["shards"] is not None else "")
            + (f", shards busy elsewhere: {report.busy_shards}" if report.busy_shards else "")
            + (
                f", shards failed (see the status page): {report.failed_shards}"
                if report.failed_shards
                else ""
            )
            + (f", shards waiting to retry: {report.backing_off_shards}" if report.backing_off_shards else "")
        )
