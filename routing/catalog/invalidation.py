"""Which changes drop which cached values (core/refresh.py): a saved or deleted key,
member (its user too: deactivated, renamed), team or application drops the keys it names
(`keys:prefix=…`, `keys:member=7`, …: a revocation stops that key at once and leaves
every other key's cached value alone, which matters while the database is away); a limit,
the limits; an upstream, deployment (a drain too), route or chain, the catalog. Connected
once, in RoutingConfig.ready, so the admin, the console, the management commands and the
config file all tell the workers."""

from collections.abc import Callable
from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_save

from core.refresh import CATALOG, KEYS, LIMITS, invalidate

# Saves that change nothing a worker caches: a key's use, a console sign-in.
_NOT_CHANGES = (frozenset({"last_used_at"}), frozenset({"last_login"}))


def _dropping(*names: str, named: Callable[[Any], str | None] | None = None) -> Any:
    def receiver(sender: Any, **kwargs: Any) -> None:
        if kwargs.get("raw"):  # loading fixtures
            return
        if kwargs.get("update_fields") in _NOT_CHANGES:
            return
        instance = kwargs.get("instance")
        if named is None or instance is None:
            invalidate(*names)
            return
        selector = named(instance)
        if selector is not None:  # None: no cached value names it
            invalidate(*(f"{name}:{selector}" if name == KEYS else name for name in names))

    return receiver


_receivers: list[Any] = []  # signals hold receivers weakly


def _member_of(user: Any) -> str | None:
    from accounts.models import Member

    member = Member.objects.filter(user_id=user.pk).values_list("pk", flat=True).first()
    return None if member is None else f"member={member}"


def connect() -> None:
    from django.contrib.auth import get_user_model

    from accounts.models import ApiKey, Application, Member, Team
    from quotas.models import Limit
    from routing.models import Deployment, Route, RouteDeployment, Upstream

    watched: list[tuple[Any, tuple[str, ...], Callable[[Any], str | None] | None]] = [
        (ApiKey, (KEYS,), lambda key: f"prefix={key.prefix}"),
        (Member, (KEYS,), lambda member: f"member={member.pk}"),
        (get_user_model(), (KEYS,), _member_of),
        (Team, (KEYS, LIMITS), lambda team: f"team={team.pk}"),
        (Application, (KEYS,), lambda application: f"application={application.pk}"),
        (Limit, (LIMITS,), None),
        (Upstream, (CATALOG,), None),
        (Deployment, (CATALOG,), None),
        (Route, (CATALOG,), None),
        (RouteDeployment, (CATALOG,), None),
    ]
    for model, names, named in watched:
        receiver = _dropping(*names, named=named)
        _receivers.append(receiver)
        post_save.connect(receiver, sender=model, dispatch_uid=f"sluice-drop-{model.__name__}")
        post_delete.connect(receiver, sender=model, dispatch_uid=f"sluice-gone-{model.__name__}")
    routes = _dropping(KEYS)
    _receivers.append(routes)
    m2m_changed.connect(routes, sender=Route.applications.through, dispatch_uid="sluice-routes")
