"""Limits, deployments, routes and the config file: thin views over quotas/ and routing/
selectors and services. Every role reads deployments and routes (the catalog is shared);
only an admin changes them."""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.parsers import BaseParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import serializers as s
from api.base import NoOptions
from api.permissions import actor_of, require_manager, require_staff, viewer_of
from quotas.forecast import Forecast
from quotas.models import Limit, Scope
from quotas.selectors import BUDGET_FIELDS, limit_rows, limit_target_find, limits_visible_to
from quotas.services import LIMIT_FIELDS, limit_set
from routing.catalog import services as routing_services
from routing.catalog.config_export import config_export
from routing.catalog.selectors import deployment_board, deployments_with_routes, routes_with_chains
from routing.models import Route

# --- limits -------------------------------------------------------------------------------


def _forecast_out(field: str, f: Forecast | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "unit": "USD" if field == "cost_per_month" else "tokens",
        "basis": f.basis,
        "spent": f.spent,
        "budget": f.budget,
        "projected": f.projected,
        "projected_share": f.share,
        "runs_out_on": f.runs_out_on,
        "daily_rate": f.daily_rate,
        "weekend_rate": f.weekend_rate,
        "days_used": f.days_used,
    }


def _limit_out(row: Any) -> dict[str, Any]:
    return s.LimitOut(
        {
            "scope": row.scope,
            "name": row.name,
            "limits": {f: getattr(row.limit, f) for f in LIMIT_FIELDS},
            "usage": row.usage.__dict__,
            "forecast": {f: _forecast_out(f, row.forecasts.get(f)) for f in BUDGET_FIELDS},
        }
    ).data


def _target(request: Request, scope: str, name: str) -> tuple[dict[str, Any], int]:
    """The limit's target in the caller's scope (404 otherwise) and its team id."""
    if scope not in Scope.values:
        raise NotFound(f"No scope {scope!r}: one of key, application, member, team.")
    found = limit_target_find(scope, name, viewer=viewer_of(request))
    if found is None:
        raise NotFound(f"No {scope} {name!r}.")
    return found.lookup, found.team_id


_SCOPE_PARAMS = [
    OpenApiParameter("scope", str, OpenApiParameter.PATH, enum=Scope.values),
    OpenApiParameter(
        "name", str, OpenApiParameter.PATH, description="key prefix, slug or member email"
    ),
]


class LimitList(NoOptions, APIView):
    @extend_schema(
        parameters=[OpenApiParameter("scope", str, enum=Scope.values)],
        responses={200: s.LimitOut(many=True)},
    )
    def get(self, request: Request) -> Response:
        """Every limit in the caller's scope with its current usage and where its monthly
        budgets are heading."""
        qs: QuerySet[Limit] = limits_visible_to(viewer_of(request)).select_related(
            "api_key__application__team"
        )
        scope = request.query_params.get("scope")
        if scope:
            if scope not in Scope.values:
                raise ValidationError({"scope": "Must be one of key, application, member, team."})
            qs = qs.filter(scope=scope)
        rows = limit_rows(list(qs.order_by("scope", "id")[:1000]), forecast=True)
        return Response([_limit_out(r) for r in rows])


class LimitDetail(NoOptions, APIView):
    @extend_schema(parameters=_SCOPE_PARAMS, responses={200: s.LimitOut})
    def get(self, request: Request, scope: str, name: str) -> Response:
        """The limits of one key, application, member or team, with current usage."""
        target, _ = _target(request, scope, name)
        limit = limits_visible_to(viewer_of(request)).filter(scope=scope, **target).first()
        if limit is None:
            raise NotFound(f"No limits set on {scope} {name!r}.")
        return Response(_limit_out(limit_rows([limit], forecast=True)[0]))

    @extend_schema(parameters=_SCOPE_PARAMS, request=s.LimitValues, responses={200: s.LimitOut})
    def put(self, request: Request, scope: str, name: str) -> Response:
        """Set limits; only the values given change (0 removes one)."""
        target, team_id = _target(request, scope, name)
        require_manager(viewer_of(request), team_id)
        serializer = s.LimitValues(data=request.data)
        serializer.is_valid(raise_exception=True)
        values = {k: v for k, v in serializer.validated_data.items() if v is not None}
        limit = limit_set(scope=scope, name=_name_of(target), actor=actor_of(request), **values)
        if limit is None:
            raise NotFound(f"No limits set on {scope} {name!r}.")
        return Response(_limit_out(limit_rows([limit], forecast=True)[0]))

    @extend_schema(parameters=_SCOPE_PARAMS, responses={204: None})
    def delete(self, request: Request, scope: str, name: str) -> Response:
        """Clear every limit of the target."""
        target, team_id = _target(request, scope, name)
        require_manager(viewer_of(request), team_id)
        limit_set(scope=scope, name=_name_of(target), clear=True, actor=actor_of(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


def _name_of(target: dict[str, Any]) -> str:
    """The name limit_set looks the target up by."""
    found = next(iter(target.values()))
    if "api_key" in target:
        return found.prefix
    if "member" in target:
        return found.user.email
    return found.slug


# --- deployments and routes ---------------------------------------------------------------


def _state_out(row: Any) -> dict[str, Any]:
    def share(x: Any) -> dict[str, Any]:
        return {"attempts": x.attempts, "capacity_errors": x.capacity_errors, "share": x.share}

    return {
        "name": row.name,
        "enabled": row.enabled,
        "drained": row.drained,
        "drained_until": row.drained_until,
        "drain_reason": row.drain_reason,
        "breaker": row.breaker,
        "open_until": row.open_until,
        "configured_limit": row.configured_limit,
        "effective_limit": row.effective_limit,
        "in_flight": row.in_flight,
        "batch_in_flight": row.batch_in_flight,
        "waiting": {"interactive": row.waiting_interactive, "batch": row.waiting_batch},
        "oldest_wait_seconds": row.oldest_wait,
        "capacity_error_share_5m": share(row.share_5m),
        "capacity_error_share_1h": share(row.share_1h),
        "alert": row.alert,
    }


class DeploymentViewSet(
    NoOptions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    serializer_class = s.DeploymentOut
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet:
        return deployments_with_routes().order_by("name")

    @extend_schema(responses={200: s.DeploymentStateOut})
    @action(detail=True, methods=["get"])
    def state(self, request: Request, name: str) -> Response:
        """Live state: breaker, effective limit, in flight, waiting by class, drain."""
        deployment = self.get_object()
        (row,) = deployment_board(names=[deployment.name])
        return Response(_state_out(row))

    def _change(self, request: Request, name: str, **kwargs: Any) -> Response:
        require_staff(viewer_of(request))
        deployment = self.get_object()
        deployment = kwargs.pop("service")(name=deployment.name, actor=actor_of(request), **kwargs)
        deployment = deployments_with_routes().get(pk=deployment.pk)
        return Response(s.DeploymentOut(deployment).data)

    @extend_schema(request=s.DrainIn, responses={200: s.DeploymentOut})
    @action(detail=True, methods=["post"])
    def drain(self, request: Request, name: str) -> Response:
        """Take it out of service for `minutes` (traffic flows down the chains)."""
        require_staff(viewer_of(request))
        data = s.DrainIn(data=request.data)
        data.is_valid(raise_exception=True)
        return self._change(
            request, name, service=routing_services.deployment_drain, **data.validated_data
        )

    @extend_schema(request=None, responses={200: s.DeploymentOut})
    @action(detail=True, methods=["post"])
    def undrain(self, request: Request, name: str) -> Response:
        return self._change(request, name, service=routing_services.deployment_drain, minutes=None)

    @extend_schema(request=None, responses={200: s.DeploymentOut})
    @action(detail=True, methods=["post"])
    def enable(self, request: Request, name: str) -> Response:
        return self._change(
            request, name, service=routing_services.deployment_set_enabled, enabled=True
        )

    @extend_schema(request=None, responses={200: s.DeploymentOut})
    @action(detail=True, methods=["post"])
    def disable(self, request: Request, name: str) -> Response:
        return self._change(
            request, name, service=routing_services.deployment_set_enabled, enabled=False
        )


def _route_out(route: Route) -> dict[str, Any]:
    return {
        "name": route.name,
        "chain": [link.deployment.name for link in route.chain.all()],
        **{
            f: getattr(route, f)
            for f in ("timeout_seconds", "max_attempts", "backoff_base", "backoff_cap")
        },
        "retry_after_cap": route.retry_after_cap,
    }


class RouteViewSet(NoOptions, viewsets.ViewSet):
    lookup_field = "name"
    lookup_value_regex = r"[^/]+"

    @extend_schema(responses={200: s.RouteOut(many=True)})
    def list(self, request: Request) -> Response:
        return Response([_route_out(r) for r in routes_with_chains()])

    @extend_schema(responses={200: s.RouteOut})
    def retrieve(self, request: Request, name: str) -> Response:
        route = next((r for r in routes_with_chains() if r.name == name), None)
        if route is None:
            raise NotFound(f"No route {name!r}.")
        return Response(_route_out(route))


# --- config as code -----------------------------------------------------------------------


class TomlRenderer(BaseRenderer):
    media_type = "application/toml"
    format = "toml"
    charset = "utf-8"

    def render(self, data: Any, accepted_media_type: Any = None, renderer_context: Any = None):
        return data.encode()


class TomlParser(BaseParser):
    """A TOML file as the request body (application/toml or text/plain)."""

    media_type = "application/toml"

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> str:
        raw = stream.read() if stream is not None else b""
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValidationError("The body is not UTF-8 text.") from None


class TextTomlParser(TomlParser):
    media_type = "text/plain"


class ConfigExport(NoOptions, APIView):
    renderer_classes = [TomlRenderer]

    @extend_schema(
        responses={(200, "application/toml"): OpenApiResponse(response=str)},
    )
    def get(self, request: Request) -> Response:
        """The catalog as a TOML file that `apply_config` (and POST /config/apply) takes."""
        require_staff(viewer_of(request))
        return Response(config_export(), content_type="application/toml; charset=utf-8")


class _ConfigChange(NoOptions, APIView):
    parser_classes = [TomlParser, TextTomlParser]
    dry_run = True

    @extend_schema(
        request={"application/toml": str, "text/plain": str},
        responses={200: s.ConfigResultOut},
    )
    def post(self, request: Request) -> Response:
        require_staff(viewer_of(request))
        text = request.data if isinstance(request.data, str) else ""
        if not text.strip():
            raise ValidationError("Send the TOML file as the body (Content-Type application/toml).")
        diff = routing_services.config_apply(
            text=text, actor=actor_of(request), dry_run=self.dry_run
        )
        return Response(
            {
                "applied": diff.applied,
                "summary": diff.report.summary(),
                "changes": [
                    {
                        "section": c.section,
                        "name": c.name,
                        "kind": c.kind,
                        "fields": {k: list(v) for k, v in c.fields.items()},
                    }
                    for c in diff.changes
                ],
            }
        )


class ConfigDryRun(_ConfigChange):
    """Check a TOML file and say what applying it would create or update; changes nothing."""

    dry_run = True


class ConfigApply(_ConfigChange):
    """Check a TOML file, then apply it in one transaction."""

    dry_run = False
