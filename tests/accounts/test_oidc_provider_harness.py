"""The OpenID Connect provider the single sign-on tests log in against
(tests/support/oidc_provider.py): an authorization-code flow with PKCE done by hand, the
ID token checked against the provider's published keys, and the failures the gateway's
client must see (no PKCE, expired or replayed codes, an ID token for another audience)."""

import base64
import hashlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

# joserfc comes with Authlib, the gateway's OIDC client.
pytest.importorskip("joserfc", reason="the OIDC tests verify tokens with joserfc (authlib)")
from joserfc import jwt
from joserfc.jwk import KeySet

from tests.support import free_port
from tests.support.oidc_provider import (
    OidcProviderHandle,
    drive_login,
    oidc_skip_reason,
    start_oidc_provider,
)

REDIRECT_URI = "http://127.0.0.1:9/oidc/callback"  # never requested: drive_login stops there
ALICE: dict[str, Any] = {
    "email": "alice@example.com",
    "email_verified": True,
    "name": "Alice",
    "groups": ["eng"],
}
SHORT_TTL = 2  # seconds; a code is exchanged well within it


def _provider(**kwargs: Any) -> Iterator[OidcProviderHandle]:
    reason = oidc_skip_reason()
    if reason:
        pytest.skip(reason)
    yield from start_oidc_provider(
        free_port(), redirect_uris=[REDIRECT_URI], accounts={"alice": ALICE}, **kwargs
    )


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProviderHandle]:
    yield from _provider()


@pytest.fixture(scope="module")
def short_code_provider() -> Iterator[OidcProviderHandle]:
    yield from _provider(code_ttl_seconds=SHORT_TTL)


@pytest.fixture(scope="module")
def wrong_audience_provider() -> Iterator[OidcProviderHandle]:
    yield from _provider(wrong_audience=True)


@dataclass
class Login:
    redirect: str  # where the provider sent the browser back
    verifier: str
    state: str
    nonce: str

    @property
    def params(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(urlsplit(self.redirect).query).items()}


def _discovery(provider: OidcProviderHandle) -> dict[str, Any]:
    return httpx.get(provider.discovery_url).json()


def _login(provider: OidcProviderHandle, *, pkce: bool = True, login: str = "alice") -> Login:
    verifier = secrets.token_urlsafe(48)
    state, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    query = {
        "client_id": provider.client_id,
        "response_type": "code",
        "scope": "openid email profile groups",
        "redirect_uri": REDIRECT_URI,
        "state": state,
        "nonce": nonce,
    }
    if pkce:
        digest = hashlib.sha256(verifier.encode()).digest()
        query["code_challenge"] = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        query["code_challenge_method"] = "S256"
    authorize = f"{_discovery(provider)['authorization_endpoint']}?{urlencode(query)}"
    with httpx.Client() as browser:  # a fresh browser: its own provider session
        return Login(drive_login(browser, authorize, login), verifier, state, nonce)


def _exchange(provider: OidcProviderHandle, code: str, verifier: str | None) -> httpx.Response:
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI}
    if verifier is not None:
        data["code_verifier"] = verifier
    return httpx.post(
        _discovery(provider)["token_endpoint"],
        data=data,
        auth=(provider.client_id, provider.client_secret),  # client_secret_basic
    )


def _verified_claims(provider: OidcProviderHandle, id_token: str) -> dict[str, Any]:
    """The ID token's claims once its signature checks against the published JWKS."""
    keys = KeySet.import_key_set(httpx.get(_discovery(provider)["jwks_uri"]).json())
    return jwt.decode(id_token, keys, algorithms=["RS256"]).claims


def test_code_flow_with_pkce(provider: OidcProviderHandle) -> None:
    login = _login(provider)
    assert login.redirect.startswith(REDIRECT_URI + "?")
    assert login.params["state"] == login.state
    assert login.params["iss"] == provider.issuer
    tokens = _exchange(provider, login.params["code"], login.verifier)
    assert tokens.status_code == 200, tokens.text

    claims = _verified_claims(provider, tokens.json()["id_token"])
    assert claims["iss"] == provider.issuer == f"http://localhost:{urlsplit(provider.url).port}"
    assert claims["aud"] == provider.client_id
    assert claims["nonce"] == login.nonce
    assert claims["sub"] == "alice"
    assert claims["groups"] == ["eng"]
    assert (claims["email"], claims["email_verified"], claims["name"]) == (
        "alice@example.com",
        True,
        "Alice",
    )

    userinfo = httpx.get(
        _discovery(provider)["userinfo_endpoint"],
        headers={"Authorization": f"Bearer {tokens.json()['access_token']}"},
    ).json()
    assert userinfo["sub"] == "alice"
    assert userinfo["groups"] == ["eng"]
    assert userinfo["email"] == "alice@example.com"


def test_a_code_is_good_once(provider: OidcProviderHandle) -> None:
    login = _login(provider)
    assert _exchange(provider, login.params["code"], login.verifier).status_code == 200
    replay = _exchange(provider, login.params["code"], login.verifier)
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"


def test_pkce_is_required(provider: OidcProviderHandle) -> None:
    # Without a code_challenge the provider refuses at once, back to the redirect_uri.
    refused = _login(provider, pkce=False)
    assert refused.params["error"] == "invalid_request"
    assert "PKCE" in refused.params["error_description"]
    assert "code" not in refused.params

    # With one, the code is no good without its verifier, or with another.
    login = _login(provider)
    for verifier in (None, secrets.token_urlsafe(48)):
        response = _exchange(provider, login.params["code"], verifier)
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_grant"


def test_an_expired_code_is_refused(short_code_provider: OidcProviderHandle) -> None:
    fresh = _login(short_code_provider)  # the same exchange in time works
    assert _exchange(short_code_provider, fresh.params["code"], fresh.verifier).status_code == 200
    login = _login(short_code_provider)
    time.sleep(SHORT_TTL + 1)
    response = _exchange(short_code_provider, login.params["code"], login.verifier)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_grant"


def test_wrong_audience_is_still_validly_signed(
    wrong_audience_provider: OidcProviderHandle,
) -> None:
    login = _login(wrong_audience_provider)
    tokens = _exchange(wrong_audience_provider, login.params["code"], login.verifier)
    assert tokens.status_code == 200, tokens.text
    claims = _verified_claims(wrong_audience_provider, tokens.json()["id_token"])
    assert claims["aud"] == "someone-else" != wrong_audience_provider.client_id
    assert claims["nonce"] == login.nonce
    assert claims["groups"] == ["eng"]


def test_changed_groups_show_at_the_next_login(provider: OidcProviderHandle) -> None:
    provider.set_groups("alice", ["ops", "admins"])
    try:
        login = _login(provider)
        tokens = _exchange(provider, login.params["code"], login.verifier).json()
        assert _verified_claims(provider, tokens["id_token"])["groups"] == ["ops", "admins"]
    finally:
        provider.set_groups("alice", ALICE["groups"])


def test_a_new_account(provider: OidcProviderHandle) -> None:
    provider.set_account("bob", {"email": "bob@example.com", "name": "Bob", "groups": []})
    login = _login(provider, login="bob")
    tokens = _exchange(provider, login.params["code"], login.verifier).json()
    claims = _verified_claims(provider, tokens["id_token"])
    assert (claims["sub"], claims["email"], claims["groups"]) == ("bob", "bob@example.com", [])


def test_any_login_name_signs_in_with_no_claims(provider: OidcProviderHandle) -> None:
    login = _login(provider, login="nobody")
    tokens = _exchange(provider, login.params["code"], login.verifier).json()
    claims = _verified_claims(provider, tokens["id_token"])
    assert claims["sub"] == "nobody"
    assert "email" not in claims and "groups" not in claims


def test_skipped_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_SKIP_OIDC_TESTS", "1")
    assert oidc_skip_reason() == "OIDC tests off: SLUICE_SKIP_OIDC_TESTS=1"
