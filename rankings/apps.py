from django.apps import AppConfig


class RankingsConfig(AppConfig):
    name = "rankings"
    verbose_name = "Rankings"

    def ready(self):
        from rankings.engine import shards  # noqa: F401  (registers the shard-count check)
