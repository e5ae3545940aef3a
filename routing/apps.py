from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"
    verbose_name = "Routing and audit"

    def ready(self) -> None:
        from routing.catalog.invalidation import connect

        connect()
