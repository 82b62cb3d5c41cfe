from django.apps import AppConfig


class RankingsConfig(AppConfig):
    name = "rankings"
    verbose_name = "Rankings"

    def ready(self):
        from catalogue.models import DELETION_GUARDS
        from rankings.conf import rankings_settings
        from rankings.engine import shards  # noqa: F401  (registers the shard-count check)
        from rankings.engine.tree import categories_in_version_trees

        rankings_settings.validate()  # an unknown name or a value out of bounds stops the start
        if categories_in_version_trees not in DELETION_GUARDS:
            DELETION_GUARDS.append(categories_in_version_trees)
