"""Password sign-in (the console's /login/ and the Django admin's): Django's ModelBackend,
except that with single sign-on's `password_login = "break-glass"` only the break-glass
accounts may use a password; everyone else signs in through the provider."""

from typing import Any

from django.contrib.auth.backends import ModelBackend
from django.http import HttpRequest

from accounts.selectors import password_login_allowed


class PasswordBackend(ModelBackend):
    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if username is not None and not password_login_allowed(username):
            return None  # a failed login: logged by accounts/login_guard.py, never the password
        return super().authenticate(request, username=username, password=password, **kwargs)
