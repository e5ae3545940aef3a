"""Talking to the OpenID provider (Authlib's Django client): the authorization code flow
with PKCE (S256), state and nonce kept in the session, the ID token's signature, issuer,
audience, expiry and nonce checked. Every way the provider's answer can fail becomes a
SignInRefused saying which check failed; no token or code is ever logged or shown.
"""

import logging
import os
from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client.errors import MismatchingStateError
from authlib.integrations.django_client import DjangoOAuth2App, OAuth
from django.http import HttpRequest, HttpResponse
from joserfc.errors import JoseError

from accounts.models import SsoConfig
from accounts.sso_rules import groups_of
from accounts.sso_services import ProviderAccount, SignInRefused

log = logging.getLogger("sluice.auth")

_TIMEOUT_SECONDS = 10
# One client per provider setting (its discovery document and keys are cached in it).
_clients: dict[tuple[str, ...], DjangoOAuth2App] = {}


def _client(config: SsoConfig) -> DjangoOAuth2App:
    secret = os.environ.get(config.client_secret_env, "")
    if not secret:
        raise SignInRefused(
            "Single sign-on is not ready",
            f"The environment variable {config.client_secret_env} (the client secret) is not "
            "set on this server. Tell your Sluice admin.",
            status=503,
        )
    key = (config.issuer, config.client_id, secret, config.scopes)
    client = _clients.get(key)
    if client is None:
        client = OAuth().register(
            name="sluice",
            client_id=config.client_id,
            client_secret=secret,
            server_metadata_url=f"{config.issuer}/.well-known/openid-configuration",
            client_kwargs={
                "scope": config.scopes,
                "code_challenge_method": "S256",
                "default_timeout": _TIMEOUT_SECONDS,
            },
        )
        _clients[key] = client
    return client


def _metadata(client: DjangoOAuth2App, config: SsoConfig) -> dict[str, Any]:
    try:
        metadata: dict[str, Any] = client.load_server_metadata()
    except (requests.RequestException, ValueError) as exc:
        log.warning("sso: the provider's discovery document failed: %s", type(exc).__name__)
        raise SignInRefused(
            "The identity provider did not answer",
            f"{config.issuer} could not be reached. Try again in a minute, or ask your admin.",
            status=502,
        ) from None
    if str(metadata.get("issuer", "")).rstrip("/") != config.issuer:
        raise SignInRefused(
            "The identity provider is misconfigured",
            f"Its discovery document names another issuer than {config.issuer}.",
            status=502,
        )
    return metadata


def authorize_redirect(
    request: HttpRequest, config: SsoConfig, redirect_uri: str, *, prompt: str | None = None
) -> HttpResponse:
    """The redirect to the provider's sign-in page; state, nonce and the PKCE verifier are
    kept in the session for the callback. `prompt="login"` asks the provider to ask who
    is signing in, even when its own session knows."""
    client = _client(config)
    _metadata(client, config)
    extra = {"prompt": prompt} if prompt else {}
    response: HttpResponse = client.authorize_redirect(request, redirect_uri, **extra)
    return response


def provider_account(request: HttpRequest, config: SsoConfig) -> ProviderAccount:
    """Redeem the callback's code and check the ID token: who signed in, and their groups."""
    if request.GET.get("error"):
        error = request.GET["error"][:64]
        raise SignInRefused(
            "The identity provider refused the sign-in",
            f"It answered {error}: {request.GET.get('error_description', '')[:200]}",
            status=400,
        )
    client = _client(config)
    _metadata(client, config)
    try:
        # Authlib checks the issuer and leaves the audience to us: it must name this client.
        token = client.authorize_access_token(
            request,
            claims_options={
                "iss": {"essential": True, "values": [config.issuer]},
                "aud": {"essential": True, "values": [config.client_id]},
            },
        )
    except MismatchingStateError:
        raise _refused("the reply does not belong to a sign-in started here (state)") from None
    except JoseError as exc:
        raise _refused(f"the ID token failed its checks ({exc.error}: {exc.description})") from None
    except AuthlibBaseError as exc:
        raise _refused(
            f"the provider refused the one-time code ({exc.error}); it may have expired "
            "or been used already"
        ) from None
    except requests.RequestException as exc:
        log.warning("sso: the token endpoint failed: %s", type(exc).__name__)
        raise _refused("the provider's token endpoint did not answer", status=502) from None
    claims = dict(token.get("userinfo") or {})
    if not claims:
        raise _refused("the provider sent no ID token")
    groups = groups_of(claims, config.groups_claim)
    if not groups and config.groups_claim not in claims:
        groups = _userinfo_groups(client, token, claims, config)
    email = claims.get("email")
    if not isinstance(email, str) or "@" not in email:
        raise _refused('the provider sent no email (add the "email" scope)')
    return ProviderAccount(
        issuer=config.issuer,
        subject=str(claims["sub"]),
        email=email.strip().lower(),
        email_verified=claims.get("email_verified") is True,
        groups=tuple(groups),
    )


def _userinfo_groups(
    client: DjangoOAuth2App, token: dict[str, Any], claims: dict[str, Any], config: SsoConfig
) -> list[str]:
    """Groups from the userinfo endpoint, for providers that leave them out of the ID
    token; its `sub` must be the ID token's."""
    try:
        info = client.userinfo(token=token)
    except (AuthlibBaseError, requests.RequestException, ValueError):
        return []
    if str(info.get("sub")) != str(claims.get("sub")):
        raise _refused("the userinfo answer is for another subject")
    return groups_of(dict(info), config.groups_claim)


def _refused(why: str, *, status: int = 400) -> SignInRefused:
    log.warning("sso: sign-in refused: %s", why)
    return SignInRefused(
        "The sign-in could not be completed", why[:1].upper() + why[1:] + ".", status=status
    )
