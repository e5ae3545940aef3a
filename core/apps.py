from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Plumbing"

    def ready(self) -> None:
        from core.change_log import publish
        from core.refresh import publish_without_redis

        publish_without_redis(publish)
