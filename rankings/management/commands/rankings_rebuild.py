from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from rankings.engine.shards import LayoutError, active, layout_plan, split_setting
from rankings.engine.split import SplitError, split_parse
from rankings.operations.backfill import VersionError, version_build


class Command(BaseCommand):
    help = (
        "Rebuild every board from raw sales into a new version while the active one keeps serving; "
        "--activate switches to it when it is ready. --shards, --pin and --unpin lay the new version "
        "out otherwise (a reshard): the switch-over re-keys the work queue and every shard's state. "
        "The boards RANKINGS_SPLIT names (or --split) are split in the new version, and only those."
    )

    def add_arguments(self, parser):
        parser.add_argument("--activate", action="store_true", help="switch readers to the new version")
        parser.add_argument(
            "--shards",
            type=int,
            metavar="N",
            help="spread the categories over N hashed shards (default: as many as the active version)",
        )
        parser.add_argument(
            "--pin",
            action="append",
            default=[],
            metavar="SLUG",
            help="give category SLUG a shard of its own, after the hashed ones (repeatable)",
        )
        parser.add_argument(
            "--unpin",
            action="append",
            default=[],
            metavar="SLUG",
            help="put a pinned category back among the hashed shards (repeatable)",
        )

        parser.add_argument(
            "--split",
            metavar="SLUG:PARTS,…",
            help="the boards to keep as sub-boards on shards of their own, e.g. all:3,toys:2; "
            "'none' for no split board (default: RANKINGS_SPLIT)",
        )

    def handle(self, *args, **options):
        number, _, live = active()
        try:
            wanted = options["split"]
            split = split_setting() if wanted is None else split_parse("" if wanted == "none" else wanted)
            layout = layout_plan(
                live, shards=options["shards"], pin=options["pin"], unpin=options["unpin"], split=split
            )
        except (LayoutError, SplitError) as error:
            raise CommandError(str(error)) from error
        if layout != live:
            self.stdout.write(f"version {number} has {live.describe()}; the new version: {layout.describe()}")
        with tqdm(total=100, unit="%", bar_format="{l_bar}{bar}| {n:.0f}% {elapsed} {postfix}") as bar:

            def progress(fraction: float, message: str) -> None:
                bar.n = round(fraction * 100)
                bar.set_postfix_str(message)

            try:
                version = version_build(activate=options["activate"], progress=progress, layout=layout)
            except VersionError as error:
                raise CommandError(str(error)) from error
        self.stdout.write(
            f"version {version.number}: {version.state}, {version.sales:,} raw sales at {version.rate:,.0f} sales/s"
        )
