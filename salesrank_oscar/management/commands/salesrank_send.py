from django.core.management.base import BaseCommand, CommandError

from salesrank_oscar.sending import outbox_send


class Command(BaseCommand):
    help = (
        "Send salesrank what the outbox holds now (what the Celery task runs). Exits 0 when nothing "
        "is left unsent but rejected rows (listed in the admin with salesrank's reason), 1 when "
        "salesrank could not be reached or refused the requests, 2 when it asked for rows to be sent again."
    )

    def handle(self, *args, **options):
        outcome = outbox_send()
        self.stdout.write(f"sent {outcome.sent}, rejected {outcome.rejected}, to send again {outcome.again}")
        if outcome.failure:
            raise CommandError(f"salesrank did not take the rest: {outcome.failure}", returncode=1)
        if outcome.again:
            raise CommandError(f"{outcome.again} rows wait to be sent again", returncode=2)
