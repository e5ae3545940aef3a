"""Key authentication for the proxy, without a database query per request for a hot key.

Each worker keeps what it learned about a key for at most `SLUICE_KEY_CACHE_SECONDS` (2 s
by default; a hot key is reloaded in the background before then), so a revoked key stops
working on every worker within that time; with Redis, revoking it tells every worker to
drop it at once (core/refresh.py). Expiry is checked against the cached expiry time on
every request, so it is exact.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from accounts.keys import key_matches, key_prefix_of
from accounts.models import ApiKey
from core.db import db_read
from core.errors import unauthorized
from core.refresh import KEYS, RefreshingCache

_LAST_USED_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """Who is calling: everything the request path needs about a key, read in one query."""

    key_id: int
    prefix: str
    secret_hash: str
    expires_at: datetime | None
    revoked: bool
    member_id: int
    member_email: str
    team_id: int
    team_slug: str
    team_time_zone: str
    application_id: int
    application_slug: str
    allowed_routes: frozenset[str]
    default_priority: str
    fallback: str
    default_max_tokens: int
    max_tokens_ceiling: int | None
    clamp_max_tokens: bool
    max_n: int | None


_principals: RefreshingCache[Principal | None] = RefreshingCache(
    lambda: settings.SLUICE_KEY_CACHE_SECONDS, name=KEYS
)


def _load(prefix: str) -> Principal | None:
    key = ApiKey.objects.select_related("member__user", "application").filter(prefix=prefix).first()
    if key is None:
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > _LAST_USED_EVERY:
        # Coarse on purpose: a write per request would cost more than the proxying.
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    routes = frozenset(key.application.routes.values_list("name", flat=True))
    return Principal(
        key_id=key.pk,
        prefix=key.prefix,
        secret_hash=key.secret_hash,
        expires_at=key.expires_at,
        revoked=key.revoked_at is not None,
        member_id=key.member_id,
        member_email=key.member.user.email,
        team_id=key.application.team_id,
        team_slug=key.application.team.slug,
        team_time_zone=key.application.team.time_zone,
        application_id=key.application_id,
        application_slug=key.application.slug,
        allowed_routes=routes,
        default_priority=key.application.default_priority,
        fallback=key.application.fallback,
        default_max_tokens=key.application.default_max_tokens,
        max_tokens_ceiling=key.application.max_tokens_ceiling,
        clamp_max_tokens=key.application.clamp_max_tokens,
        max_n=key.application.max_n,
    )


async def _principal_for(prefix: str) -> Principal | None:
    return await _principals.get(prefix, lambda: db_read(_load, prefix))


def presented_key(headers: dict[str, str]) -> str | None:
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return headers.get("x-api-key", "").strip() or None


async def authenticate(plaintext: str | None) -> Principal:
    if not plaintext:
        raise unauthorized(
            "Missing API key. Send it as 'Authorization: Bearer sk-sluice-...' or in 'x-api-key'."
        )
    prefix = key_prefix_of(plaintext)
    principal = await _principal_for(prefix) if prefix else None
    if principal is None or not key_matches(plaintext, principal.secret_hash):
        raise unauthorized("Invalid API key.")
    if principal.revoked:
        raise unauthorized(f"API key {principal.prefix} has been revoked.")
    if principal.expires_at is not None and principal.expires_at <= timezone.now():
        raise unauthorized(f"API key {principal.prefix} has expired.")
    return principal
