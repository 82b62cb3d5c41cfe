from django.core.management.base import BaseCommand, CommandError

from rankings.operations.verify import rankings_verify


class Command(BaseCommand):
    help = "Recompute every board from raw sales, compare with Redis, print differences, exit 1 on any."

    def add_arguments(self, parser):
        parser.add_argument(
            "--repair",
            action="store_true",
            help="rebuild each shard that differs from the buckets (under its lock), then verify it again",
        )

    def handle(self, *args, **options):
        report = rankings_verify(repair=options["repair"])
        for shard in report.repaired:
            self.stdout.write(f"repaired shard {shard}: rebuilt from the buckets")
        for difference in report.differences:
            self.stdout.write(difference.describe())
        summary = f"{report.boards} boards, {report.members} members, {len(report.differences)} differ"
        if not report.exact:
            raise CommandError(summary)
        self.stdout.write(f"exact: {summary}")
