"""The single sign-on world of the console tests: a real OpenID provider (npm
`oidc-provider`, tests/support/oidc_provider.py) and a gateway whose `[sso]` config points at
it, with groups mapped to two teams and to staff. The fixtures are in conftest.py."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from tests.support import GatewayHandle
from tests.support.oidc_provider import OidcProviderHandle, drive_login

SECRET_ENV = "SLUICE_OIDC_CLIENT_SECRET"
DISPLAY_NAME = "Test IdP"
CODE_TTL_SECONDS = 4  # short, so a test can let a code expire
# Provider group -> what it grants (the config file's [[sso.groups]]).
GROUP_RULES = [
    {"group": "sluice-eng", "team": "sso-eng", "role": "member"},
    {"group": "sluice-eng-admins", "team": "sso-eng", "role": "admin"},
    {"group": "sluice-research", "team": "sso-research", "role": "member"},
    {"group": "sluice-ops", "staff": True},
]


def account(sub: str, *groups: str, verified: bool = True) -> dict[str, Any]:
    return {
        "email": f"{sub}@sso.example.com",
        "email_verified": verified,
        "name": sub.title(),
        "groups": list(groups),
    }


def sso_section(provider: OidcProviderHandle, **overrides: Any) -> dict[str, Any]:
    return {
        "display_name": DISPLAY_NAME,
        "issuer": provider.issuer,
        "client_id": provider.client_id,
        "client_secret_env": SECRET_ENV,
        "scopes": "openid email profile groups",
        "groups": GROUP_RULES,
        **overrides,
    }


@dataclass
class SsoWorld:
    gateway: GatewayHandle
    provider: OidcProviderHandle
    wrong_audience: OidcProviderHandle  # same client, ID tokens for another audience

    def start(self, client: httpx.Client, next_path: str = "/keys/") -> str:
        """Begin a sign-in at the console; the provider's authorize URL it redirects to."""
        r = client.get(f"{self.gateway.url}/sso/login/", params={"next": next_path})
        assert r.status_code == 302, (r.status_code, r.text[:300])
        return r.headers["location"]

    def callback_for(self, client: httpx.Client, login: str) -> str:
        """The provider's redirect back to the console (code and state), not yet followed."""
        return drive_login(client, self.start(client), login)

    @contextmanager
    def signed_in(self, login: str) -> Iterator[tuple[httpx.Client, httpx.Response]]:
        """A whole sign-in as `login` in a fresh client (its own cookies at both ends):
        the client, and the console's answer to the callback."""
        with httpx.Client(timeout=15) as client:
            yield client, client.get(self.callback_for(client, login))

    def sign_in(self, login: str) -> httpx.Response:
        with self.signed_in(login) as (_, answer):
            return answer
