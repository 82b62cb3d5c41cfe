from rankings.ingest.imports import engagements_import
from rankings.management.commands import import_sales


class Command(import_sales.Command):
    help = (
        "Import engagement events (views, wish-list adds) from FILE: JSON lines (one event object per "
        "line) or CSV with a header (ts, productId, kind, and optionally id and categories separated "
        "by | or ;; an empty cell means absent). Events are validated as by POST /v1/engagements and "
        "stored in chunks of 10,000; rejected lines go to FILE.rejected.jsonl with their line number "
        "and reason."
    )
    importer = staticmethod(engagements_import)
