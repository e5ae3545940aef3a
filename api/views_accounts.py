"""Teams, members, applications, keys and the admin actions log: thin views over
accounts/selectors.py (who sees what) and accounts/services.py (every change, logged)."""

from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import (
    action,
    api_view,
    authentication_classes,
    permission_classes,
)
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import services
from accounts.models import ApiKey, Member
from accounts.selectors import (
    KEY_STATES,
    admin_actions_visible_to,
    applications_visible_to,
    keys_in_state,
    keys_visible_to,
    management_tokens_visible_to,
    member_by_email,
    members_visible_to,
    teams_visible_to,
)
from api import serializers as s
from api.base import NoOptions
from api.permissions import (
    HasRole,
    IsManager,
    actor_of,
    require,
    require_manager,
    require_staff,
    viewer_of,
)
from routing.models import Route


def _valid(serializer_class: type, request: Request, **kwargs: Any) -> dict[str, Any]:
    serializer = serializer_class(data=request.data, **kwargs)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


def _team_in_scope(request: Request, slug: str) -> Any:
    """A team named in a body: unknown or out of scope is a 400 naming the field."""
    team = teams_visible_to(viewer_of(request)).filter(slug=slug).first()
    if team is None:
        raise ValidationError({"team": f"No team {slug!r}."})
    return team


def _routes(names: list[str] | None) -> list[Route] | None:
    if names is None:
        return None
    found = {r.name: r for r in Route.objects.filter(name__in=names)}
    missing = sorted(set(names) - set(found))
    if missing:
        raise ValidationError({"routes": f"No route(s): {', '.join(missing)}."})
    return [found[n] for n in dict.fromkeys(names)]


class TeamViewSet(
    NoOptions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Teams: an admin sees and creates all; everyone else sees their own team."""

    serializer_class = s.TeamOut
    lookup_field = "slug"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet:
        return teams_visible_to(viewer_of(self.request)).order_by("slug")

    @extend_schema(request=s.TeamCreate, responses={201: s.TeamOut})
    def create(self, request: Request) -> Response:
        require_staff(viewer_of(request))
        data = _valid(s.TeamCreate, request)
        team = services.team_create(actor=actor_of(request), **data)
        return Response(s.TeamOut(team).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.TeamUpdate, responses={200: s.TeamOut})
    def partial_update(self, request: Request, slug: str) -> Response:
        team = self.get_object()
        require_manager(viewer_of(request), team.pk)
        data = _valid(s.TeamUpdate, request)
        team = services.team_update(
            actor=actor_of(request),
            team=team,
            name=data.get("name", team.name),
            time_zone=data.get("time_zone", team.time_zone),
        )
        return Response(s.TeamOut(team).data)


@extend_schema(
    parameters=[
        OpenApiParameter("team", str, description="team slug"),
        OpenApiParameter("role", str, enum=Member.Role.values),
        OpenApiParameter("email", str),
    ]
)
class MemberViewSet(
    NoOptions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Members: an admin sees all, a team admin their team, a member themselves."""

    serializer_class = s.MemberOut

    def get_queryset(self) -> QuerySet:
        qs = members_visible_to(viewer_of(self.request)).order_by("id")
        params = self.request.query_params
        if params.get("team"):
            qs = qs.filter(team__slug=params["team"])
        if params.get("role"):
            qs = qs.filter(role=params["role"])
        if params.get("email"):
            qs = qs.filter(user__email=params["email"].strip().lower())
        return qs

    @extend_schema(request=s.MemberCreate, responses={201: s.MemberOut})
    def create(self, request: Request) -> Response:
        viewer = viewer_of(request)
        require_manager(viewer)
        data = _valid(s.MemberCreate, request)
        team = _team_in_scope(request, data.pop("team"))
        require_manager(viewer, team.pk)
        member = services.member_create(actor=actor_of(request), team=team, **data)
        return Response(s.MemberOut(member).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.MemberUpdate, responses={200: s.MemberOut})
    def partial_update(self, request: Request, pk: str) -> Response:
        member = self.get_object()
        viewer = viewer_of(request)
        require_manager(viewer, member.team_id)
        data = _valid(s.MemberUpdate, request)
        actor = actor_of(request)
        if "role" in data:
            member = services.member_update(actor=actor, member=member, role=data["role"])
        if "active" in data:
            require(member.pk != viewer.member_id, "You cannot deactivate yourself.")
            member = services.member_set_active(actor=actor, member=member, active=data["active"])
        return Response(s.MemberOut(member).data)


@extend_schema(parameters=[OpenApiParameter("team", str, description="team slug")])
class ApplicationViewSet(
    NoOptions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Applications with their routes and policies; admins and team admins change them."""

    serializer_class = s.ApplicationOut
    lookup_field = "slug"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet:
        qs = applications_visible_to(viewer_of(self.request)).prefetch_related("routes")
        if self.request.query_params.get("team"):
            qs = qs.filter(team__slug=self.request.query_params["team"])
        return qs.order_by("slug")

    @extend_schema(request=s.ApplicationCreate, responses={201: s.ApplicationOut})
    def create(self, request: Request) -> Response:
        viewer = viewer_of(request)
        require_manager(viewer)
        data = _valid(s.ApplicationCreate, request)
        team = _team_in_scope(request, data.pop("team"))
        require_manager(viewer, team.pk)
        routes = _routes(data.pop("routes", None))
        app = services.application_create(actor=actor_of(request), team=team, routes=routes, **data)
        return Response(s.ApplicationOut(app).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.ApplicationUpdate, responses={200: s.ApplicationOut})
    def partial_update(self, request: Request, slug: str) -> Response:
        app = self.get_object()
        require_manager(viewer_of(request), app.team_id)
        data = _valid(s.ApplicationUpdate, request)
        routes = _routes(data.pop("routes", None))
        app = services.application_update(
            actor=actor_of(request), application=app, routes=routes, **data
        )
        return Response(s.ApplicationOut(app).data)


@extend_schema(
    parameters=[
        OpenApiParameter("member", str, description="the member's email"),
        OpenApiParameter("application", str, description="application slug"),
        OpenApiParameter("state", str, enum=list(KEY_STATES)),
    ]
)
class KeyViewSet(
    NoOptions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Gateway keys (sk-sluice-…). The full key appears only in the answer that creates it
    (issue or rotate); everywhere else a key is named by its prefix."""

    serializer_class = s.KeyOut
    lookup_field = "prefix"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet:
        qs = keys_visible_to(viewer_of(self.request))
        params = self.request.query_params
        if params.get("member"):
            qs = qs.filter(member__user__email=params["member"].strip().lower())
        if params.get("application"):
            qs = qs.filter(application__slug=params["application"])
        state = params.get("state")
        if state in KEY_STATES:
            qs = keys_in_state(qs, state)
        elif state:
            raise ValidationError({"state": f"Must be one of {', '.join(KEY_STATES)}."})
        return qs.order_by("-created_at", "-id")

    @extend_schema(request=s.KeyCreate, responses={201: s.IssuedKeyOut})
    def create(self, request: Request) -> Response:
        viewer = viewer_of(request)
        data = _valid(s.KeyCreate, request)
        if "member" in data:
            email = data["member"].strip().lower()
            member = member_by_email(members_visible_to(viewer), email)
            if member is None:
                raise ValidationError({"member": f"No member {email!r}."})
        else:
            member = members_visible_to(viewer).filter(pk=viewer.member_id).first()
            if member is None:
                raise ValidationError({"member": "This field is required (you are no member)."})
        require(
            member.pk == viewer.member_id or viewer.manages_team(member.team_id),
            "Only an admin or the member's team admin may create keys for another member.",
        )
        application = applications_visible_to(viewer).filter(slug=data["application"]).first()
        if application is None:
            raise ValidationError({"application": f"No application {data['application']!r}."})
        days = data.get("expires_days")
        key, plaintext = services.key_create(
            actor=actor_of(request),
            member=member,
            application=application,
            name=data["name"],
            expires_at=timezone.now() + timedelta(days=days) if days else None,
        )
        return Response(_issued(key, plaintext), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: s.KeyOut})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, prefix: str) -> Response:
        key = self.get_object()
        key = services.key_revoke(actor=actor_of(request), prefix=key.prefix)
        return Response(s.KeyOut(key).data)

    @extend_schema(request=s.KeyRotate, responses={201: s.IssuedKeyOut})
    @action(detail=True, methods=["post"])
    def rotate(self, request: Request, prefix: str) -> Response:
        key = self.get_object()
        data = _valid(s.KeyRotate, request)
        new_key, plaintext = services.key_rotate(
            actor=actor_of(request), key=key, grace=timedelta(minutes=data["grace_minutes"])
        )
        return Response(_issued(new_key, plaintext), status=status.HTTP_201_CREATED)


def _issued(key: ApiKey, plaintext: str) -> dict[str, Any]:
    key = ApiKey.objects.select_related("member__user", "application").get(pk=key.pk)
    return {**s.KeyOut(key).data, "key": plaintext}


class AdminActionViewSet(
    NoOptions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """The admin actions log, read only: an admin reads all of it, a team admin the actions
    on their team's objects; members may not read it (403)."""

    serializer_class = s.AdminActionOut
    permission_classes = (HasRole, IsManager)

    def get_queryset(self) -> QuerySet:
        return admin_actions_visible_to(viewer_of(self.request)).order_by("-at", "-id")


@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE"])
@authentication_classes([])
@permission_classes([AllowAny])
def not_found(request: Request) -> Response:
    raise NotFound(f"No API endpoint {request.path}.")


class TokenViewSet(
    NoOptions, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet
):
    """Management tokens. A console user makes their own (it acts with their role, narrowed
    to a team if asked); the token is shown once. Tokens do not make tokens: creating one
    needs the console session (or `manage.py issue_admin_token`)."""

    serializer_class = s.TokenOut
    lookup_field = "prefix"
    lookup_value_regex = r"[^/]+"

    def get_queryset(self) -> QuerySet:
        return management_tokens_visible_to(viewer_of(self.request)).order_by("-created_at", "-id")

    @extend_schema(request=s.TokenCreate, responses={201: s.IssuedTokenOut})
    def create(self, request: Request) -> Response:
        viewer = viewer_of(request)
        require(
            request.auth is None and viewer.user_id is not None,
            "Management tokens are made from the console session or manage.py "
            "issue_admin_token, not with another token.",
        )
        data = _valid(s.TokenCreate, request)
        if "team" in data:
            _team_in_scope(request, data["team"])
        token, plaintext = services.management_token_issue(
            actor=actor_of(request),
            name=data["name"],
            user_id=request.user.pk,
            team_slug=data.get("team"),
            expires_days=data.get("expires_days"),
        )
        return Response(
            {**s.TokenOut(token).data, "token": plaintext}, status=status.HTTP_201_CREATED
        )

    @extend_schema(request=None, responses={200: s.TokenOut})
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, prefix: str) -> Response:
        token = self.get_object()
        token = services.management_token_revoke(actor=actor_of(request), prefix=token.prefix)
        return Response(s.TokenOut(token).data)
