"""Key authentication for the proxy, without a database query per request for a hot key,
nor for a made-up one.

Each worker keeps what it learned about a key for at most `SLUICE_KEY_CACHE_SECONDS` (2 s
by default; a hot key is reloaded in the background before then), so a revoked key stops
working on every worker within that time; with Redis, revoking it tells every worker to
drop it at once (core/refresh.py: a change to a key, member, application or team drops
only the keys it names). While the database does not answer, a cached key keeps working
for `SLUICE_STALE_IF_ERROR_SECONDS` (core/refresh.py). Expiry is checked against the
cached expiry time on every request, so it is exact.

Every key's prefix is kept in memory (`_KnownPrefixes`): a prefix that is not there is
refused without a query of its own (see there).
"""

import asyncio
import math
import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from accounts.keys import key_matches, key_prefix_of
from accounts.models import ApiKey
from core.db import db_read_on_request
from core.errors import unauthorized
from core.refresh import KEYS, RefreshingCache, on_change

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
    member_active: bool = True  # False: the member was deactivated, their keys are refused
    cache_ttl_seconds: int = 0  # the application's response cache (0: off)


def _named(prefix: Hashable, principal: Principal | None, selector: str) -> bool:
    """Whether a change (`prefix=…`, `member=7`, `application=3`, `team=2`) names this key;
    one this code does not know names every key."""
    what, _, value = selector.partition("=")
    if what == "prefix":
        return prefix == value
    ids = {"member": "member_id", "application": "application_id", "team": "team_id"}
    if what not in ids:
        return True
    return principal is not None and str(getattr(principal, ids[what])) == value


_principals: RefreshingCache[Principal | None] = RefreshingCache(
    lambda: settings.SLUICE_KEY_CACHE_SECONDS, name=KEYS, select=_named
)


def _load(prefix: str) -> Principal | None:
    key = (
        ApiKey.objects.select_related("member__user", "application__team")
        .filter(prefix=prefix)
        .first()
    )
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
        member_active=key.member.user.is_active,
        cache_ttl_seconds=key.application.cache_ttl_seconds,
    )


def _all_prefixes() -> list[str]:
    return list(ApiKey.objects.values_list("prefix", flat=True))


class _KnownPrefixes:
    """Every key's prefix, in this worker's memory. A prefix missing from it is looked for
    in a load of the whole set (one query) begun after the request arrived, so a key made a
    moment ago by a process that could not tell this worker (no Redis) is still found; loads
    run one at a time, at most one every `SLUICE_KEY_PREFIXES_RELOAD_SECONDS`, and every
    missing prefix that arrives meanwhile waits for the next one: a flood of made-up
    prefixes costs a query a second, not one each. A new key's invalidation message adds its
    prefix at once (`keys:prefix=…`). Prefixes of deleted keys stay (a lookup then finds
    nothing): the set only says which prefixes may be keys."""

    def __init__(self) -> None:
        self.prefixes: set[str] = set()
        self.loads = 0  # whole-set loads begun (tests and benchmarks read it)
        self._begun = -math.inf  # when the last load that succeeded began (monotonic)
        self._tried = -math.inf  # when the last load began
        self._task: asyncio.Task[None] | None = None

    def add(self, prefix: str) -> None:
        self.prefixes.add(prefix)

    def forget(self) -> None:
        self.prefixes.clear()
        self._begun = self._tried = -math.inf

    async def may_exist(self, prefix: str) -> bool:
        if prefix in self.prefixes:
            return True
        arrived = time.monotonic()
        while self._begun < arrived:  # no load begun since the request arrived
            task = self._task
            if task is None or task.done() or task.get_loop() is not asyncio.get_running_loop():
                task = self._task = asyncio.ensure_future(self._load())
            await asyncio.shield(task)  # a database outage is a 503 (database_unavailable)
            # Found by a load begun a moment before the request arrived (a new worker's
            # first load, with calls still coming in): enough. Only "no such prefix" needs a
            # load begun after it, and that one waits out the pause between loads.
            if prefix in self.prefixes:
                return True
        return prefix in self.prefixes

    async def _load(self) -> None:
        pause = self._tried + settings.SLUICE_KEY_PREFIXES_RELOAD_SECONDS - time.monotonic()
        if pause > 0:
            await asyncio.sleep(pause)
        begun = self._tried = time.monotonic()
        self.loads += 1
        self.prefixes.update(await db_read_on_request(_all_prefixes))
        self._begun = begun


known_prefixes = _KnownPrefixes()


def _key_changed(selector: str | None) -> None:
    """A key was saved (made, revoked, rotated): its prefix may be a key from now on."""
    what, _, prefix = (selector or "").partition("=")
    if what == "prefix" and prefix:
        known_prefixes.add(prefix)
        _unknown.pop(prefix, None)


on_change(KEYS, _key_changed)

# Prefixes no key has, remembered apart from the keys (a flood of made-up ones must not push
# real keys out): a client retrying with a wrong key is answered at once. Safe to keep a
# while: a new key's prefix is random, so it was never looked up before it existed.
_unknown: dict[str, float] = {}
_MAX_UNKNOWN = 100_000


async def _principal_for(prefix: str) -> Principal | None:
    until = _unknown.get(prefix)
    if until is not None:
        if time.monotonic() < until:
            return None
        del _unknown[prefix]
    if not await known_prefixes.may_exist(prefix):
        principal = None
    else:
        principal = await _principals.get(prefix, lambda: db_read_on_request(_load, prefix))
    if principal is None:
        if len(_unknown) >= _MAX_UNKNOWN:
            _unknown.clear()
        _unknown[prefix] = time.monotonic() + settings.SLUICE_UNKNOWN_KEY_CACHE_SECONDS
    return principal


async def principal_for_prefix(prefix: str) -> Principal | None:
    """A key known by its public prefix (the batch runner acts for the key that created the
    batch); None when it is gone. Revocation and expiry are for the caller to check."""
    return await _principal_for(prefix)


def presented_key(headers: Mapping[str, str]) -> str | None:
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
    if not principal.member_active:
        raise unauthorized(f"API key {principal.prefix} belongs to a deactivated member.")
    if principal.expires_at is not None and principal.expires_at <= timezone.now():
        raise unauthorized(f"API key {principal.prefix} has expired.")
    return principal


def forget_cached_keys() -> None:
    """Forget every key this worker knows, found or not (tests start from a cold cache)."""
    _principals.clear()
    _unknown.clear()
    known_prefixes.forget()
