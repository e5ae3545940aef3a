"""Which changes drop which cached values (core/refresh.py): a saved or deleted key,
member, team or application drops the keys; a limit, the limits; an upstream, deployment
(a drain too), route or chain, the catalog. Connected once, in RoutingConfig.ready, so the
admin, the console, the management commands and the config file all tell the workers."""

from typing import Any

from django.db.models.signals import m2m_changed, post_delete, post_save

from core.refresh import CATALOG, KEYS, LIMITS, invalidate


def _dropping(*names: str) -> Any:
    def receiver(sender: Any, **kwargs: Any) -> None:
        if kwargs.get("raw"):  # loading fixtures
            return
        if kwargs.get("update_fields") == frozenset({"last_used_at"}):
            return  # a key's use, not a change
        invalidate(*names)

    return receiver


_receivers: list[Any] = []  # signals hold receivers weakly


def connect() -> None:
    from accounts.models import ApiKey, Application, Member, Team
    from quotas.models import Limit
    from routing.models import Deployment, Route, RouteDeployment, Upstream

    watched: list[tuple[Any, tuple[str, ...]]] = [
        (ApiKey, (KEYS,)),
        (Member, (KEYS,)),
        (Team, (KEYS, LIMITS)),
        (Application, (KEYS,)),
        (Limit, (LIMITS,)),
        (Upstream, (CATALOG,)),
        (Deployment, (CATALOG,)),
        (Route, (CATALOG,)),
        (RouteDeployment, (CATALOG,)),
    ]
    for model, names in watched:
        receiver = _dropping(*names)
        _receivers.append(receiver)
        post_save.connect(receiver, sender=model, dispatch_uid=f"sluice-drop-{model.__name__}")
        post_delete.connect(receiver, sender=model, dispatch_uid=f"sluice-gone-{model.__name__}")
    routes = _dropping(KEYS)
    _receivers.append(routes)
    m2m_changed.connect(routes, sender=Route.applications.through, dispatch_uid="sluice-routes")
