from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"
    verbose_name = "Routing and audit"

    def ready(self) -> None:
        from core.outcomes import Outcome
        from core.sqlite_binding import bind_plainly
        from routing.catalog.invalidation import connect
        from routing.request_path.classify import ErrorClass

        connect()
        bind_plainly(Outcome, ErrorClass)  # the enums of the audit rows
