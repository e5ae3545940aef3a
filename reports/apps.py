from django.apps import AppConfig


class ReportsConfig(AppConfig):
    """Read-only: no models, no migrations."""

    name = "reports"
    verbose_name = "Reports"
