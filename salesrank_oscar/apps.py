from django.apps import AppConfig


class SalesrankOscarConfig(AppConfig):
    name = "salesrank_oscar"
    verbose_name = "salesrank"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from . import receivers

        receivers.connect()
