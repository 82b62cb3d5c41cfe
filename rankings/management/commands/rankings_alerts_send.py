from django.core.management.base import BaseCommand

from rankings.management.arguments import instant
from rankings.operations.webhooks import alerts_send


class Command(BaseCommand):
    help = (
        "Deliver the rank alerts' firings that are due (and their retries) as signed webhooks, as the "
        "worker's periodic task does, until none is due or --budget seconds have passed. --now sends "
        "what is due as of that instant (a history replayed with rankings_tick --now)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--now", type=instant, help="ISO-8601 instant with offset (default: the clock)")
        parser.add_argument(
            "--budget",
            type=float,
            help="stop claiming after this many seconds (default ALERTS_SEND_BUDGET_SECONDS)",
        )

    def handle(self, *args, **options):
        report = alerts_send(now=options["now"], budget=options["budget"])
        self.stdout.write(
            f"{report.attempts} attempts in {report.seconds:.1f} s: {report.delivered} delivered, "
            f"{report.refused} refused (retried later), {report.given_up} given up"
            + "".join(f"; {count} {reason}" for reason, count in report.errors.most_common(5))
        )
