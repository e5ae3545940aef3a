"""Who calls the management API: a management token (`Authorization: Bearer
sk-sluice-admin-…`) or the console's session (with its CSRF token, as DRF checks it).

A gateway key (`sk-sluice-…`) is refused with 401: it is for /v1/, never for managing.
"""

from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from accounts.keys import KEY_PREFIX, MANAGEMENT_TOKEN_PREFIX
from accounts.models import ManagementToken
from accounts.selectors import management_token_find, viewer_for_token
from accounts.services import management_token_touch


@dataclass(frozen=True)
class TokenUser:
    """request.user for a token that belongs to no user (an admin token from a command)."""

    label: str
    pk: None = None
    is_authenticated: bool = True
    is_active: bool = True
    is_staff: bool = False

    def __str__(self) -> str:
        return self.label

    def get_username(self) -> str:
        return self.label


class ManagementTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[object, ManagementToken] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        value = value.strip()
        if value.startswith(MANAGEMENT_TOKEN_PREFIX):
            token = management_token_find(value)
            if token is None:
                raise AuthenticationFailed("Invalid, revoked or expired management token.")
        elif value.startswith(KEY_PREFIX):
            raise AuthenticationFailed(
                "This is a gateway key (sk-sluice-…), not a management token "
                "(sk-sluice-admin-…); gateway keys only call /v1/."
            )
        else:
            raise AuthenticationFailed("Invalid management token.")
        viewer = viewer_for_token(token)
        if viewer.role == "anonymous":
            raise AuthenticationFailed(
                f"Management token {token.prefix}: its user has no role in its team."
            )
        management_token_touch(token=token)
        request._sluice_viewer = viewer  # type: ignore[attr-defined]
        return (token.user or TokenUser(viewer.label)), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="sluice-management"'


class ConsoleSessionAuthentication(SessionAuthentication):
    """The console's login, for the browser (the docs page, the console's own scripts).
    DRF enforces CSRF on unsafe methods for it."""
