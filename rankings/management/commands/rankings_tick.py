from django.core.management.base import BaseCommand, CommandError

from rankings.aggregate import ClockWentBackwards, tick
from rankings.management.arguments import instant
from rankings.shards import ShardCountMismatch


class Command(BaseCommand):
    help = "Aggregate every pending sale and expire buckets, as of --now (default: the clock)."

    def add_arguments(self, parser):
        parser.add_argument("--now", type=instant, help="ISO-8601 instant with offset; may not go backwards")

    def handle(self, *args, **options):
        try:
            report = tick(now=options["now"])
        except (ClockWentBackwards, ShardCountMismatch) as error:
            raise CommandError(str(error)) from error
        self.stdout.write(
            f"tick as of {report.now.isoformat()}: {report.sales} sales in {report.batches} batches, "
            f"{report.redis_writes} board writes, {report.too_old} too old, "
            f"{report.rebuilt_shards} shards rebuilt, {report.duration_ms:.0f} ms"
            + (f", shards busy elsewhere: {report.busy_shards}" if report.busy_shards else "")
        )
