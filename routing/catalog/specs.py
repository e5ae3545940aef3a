"""The routes as the proxy sees them: an immutable snapshot, reloaded every few seconds so
edits (config file, admin, console) take effect on every worker without a restart."""

import os
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from core.db import db_read
from core.refresh import CATALOG, RefreshingCache
from routing.catalog.config_file import api_key_env_allowed
from routing.deployment_state import Limits
from routing.models import Route


def _upstream_key(name: str) -> str | None:
    """The key an upstream is called with; a variable outside SLUICE_UPSTREAM_KEY_ENV (set
    through the Django admin, say) is never read, so it is never sent."""
    return os.environ.get(name) if name and api_key_env_allowed(name) else None


@dataclass(frozen=True)
class UpstreamSpec:
    name: str
    base_url: str
    api_key: str | None  # read from the environment at load time; never stored
    connect_timeout: float
    read_timeout: float
    forward_openai_headers: bool = False
    kind: str = "openai"  # Upstream.Kind: the protocol it speaks
    http2: bool = False


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    model: str
    upstream: UpstreamSpec
    tier: str
    max_concurrency: int
    context_window: int
    input_price_per_million: Decimal
    output_price_per_million: Decimal
    limits: Limits
    drained_until: float | None = None  # epoch seconds

    def drained(self, now: float) -> bool:
        return self.drained_until is not None and now < self.drained_until

    def cost(self, tokens_in: int, tokens_out: int) -> Decimal:
        return (
            tokens_in * self.input_price_per_million + tokens_out * self.output_price_per_million
        ) / 1_000_000


@dataclass(frozen=True)
class RetryPolicy:
    timeout: float
    max_attempts: int
    backoff_base: float
    backoff_cap: float
    retry_after_cap: float


@dataclass(frozen=True)
class RouteSpec:
    name: str
    chain: tuple[DeploymentSpec, ...]  # enabled deployments, in order
    policy: RetryPolicy
    translation: str = "degrade"  # Route.Translation: a call crossing kinds degrades or not


def _load() -> dict[str, RouteSpec]:
    routes: dict[str, RouteSpec] = {}
    for route in Route.objects.prefetch_related("chain__deployment__upstream"):
        chain = []
        for link in route.chain.all():
            d = link.deployment
            if not d.enabled:
                continue
            u = d.upstream
            chain.append(
                DeploymentSpec(
                    name=d.name,
                    model=d.model,
                    upstream=UpstreamSpec(
                        name=u.name,
                        base_url=u.base_url.rstrip("/"),
                        api_key=_upstream_key(u.api_key_env),
                        connect_timeout=u.connect_timeout,
                        read_timeout=u.read_timeout,
                        forward_openai_headers=u.forward_openai_headers,
                        kind=u.kind,
                        http2=u.http2,
                    ),
                    tier=d.tier,
                    max_concurrency=d.max_concurrency,
                    context_window=d.context_window,
                    input_price_per_million=d.input_price_per_million,
                    output_price_per_million=d.output_price_per_million,
                    limits=Limits(
                        max_concurrency=d.max_concurrency,
                        threshold=d.breaker_threshold,
                        cooldown=d.breaker_cooldown,
                        retry_ratio=d.retry_budget,
                        reserve=d.interactive_reserve,
                    ),
                    drained_until=d.drained_until.timestamp() if d.drained_until else None,
                )
            )
        policy = RetryPolicy(
            timeout=route.timeout_seconds,
            max_attempts=route.max_attempts,
            backoff_base=route.backoff_base,
            backoff_cap=route.backoff_cap,
            retry_after_cap=route.retry_after_cap,
        )
        routes[route.name] = RouteSpec(
            name=route.name, chain=tuple(chain), policy=policy, translation=route.translation
        )
    return routes


class Catalog:
    def __init__(self) -> None:
        self._cache: RefreshingCache[dict[str, RouteSpec]] = RefreshingCache(
            lambda: settings.SLUICE_CATALOG_CACHE_SECONDS, name=CATALOG
        )

    async def routes(self) -> dict[str, RouteSpec]:
        return await self._cache.get("routes", lambda: db_read(_load))

    def invalidate(self) -> None:
        self._cache.clear()


catalog = Catalog()
