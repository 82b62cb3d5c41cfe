from django.core.management.base import BaseCommand
from django.utils import timezone

from rankings.engine.batches import clock_reset
from rankings.management.arguments import instant
from rankings.management.commands.rankings_tick import refuse_far_future


class Command(BaseCommand):
    help = (
        "The way out of a clock that went wrong: after a tick ran at a wrong instant (e.g. "
        "`rankings_tick --now 2099-01-01T00:00:00Z --allow-future` emptied every window and every "
        "later tick fails with 'before the last tick'), wait for running ticks, then under every "
        "shard's lock set each shard's instant to --to (default: now) and rebuild its boards from "
        "the buckets as of that instant. Ticks then resume normally and the boards equal the "
        "recompute (check with rankings_verify). No sale is lost: buckets count sales by their own "
        "time. A rebuilt version not yet switched to must be rebuilt again afterwards."
    )

    def add_arguments(self, parser):
        parser.add_argument("--to", type=instant, help="ISO-8601 instant with offset (default: the clock)")
        parser.add_argument(
            "--allow-future", action="store_true", help="accept a --to far ahead of the clock"
        )

    def handle(self, *args, **options):
        to = options["to"] or timezone.now()
        if not options["allow_future"]:
            refuse_far_future(to, option="--to")
        shards = clock_reset(to=to)
        self.stdout.write(f"clock reset to {to.isoformat()}: {len(shards)} shards rebuilt from their buckets")
