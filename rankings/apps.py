from django.apps import AppConfig


class RankingsConfig(AppConfig):
    name = "rankings"
    verbose_name = "Rankings"

    def ready(self):
        from rankings.conf import rankings_settings
        from rankings.engine import shards  # noqa: F401  (registers the shard-count check)

        rankings_settings.validate()  # an unknown name or a value out of bounds stops the start
