from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and keys"

    def ready(self) -> None:
        from accounts import login_guard  # noqa: F401 - connects the failed-login log
