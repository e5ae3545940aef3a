from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from accounts.models import (
    AdminAction,
    ApiKey,
    Application,
    ManagementToken,
    Member,
    SsoConfig,
    SsoIdentity,
    Team,
)
from accounts.selectors import viewer_for
from accounts.services import Actor, member_keys_outside_team_revoke


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "time_zone", "batch_windows")


@admin.register(Member)
class MemberAdmin(admin.ModelAdmin):
    list_display = ("user", "team", "role")
    list_filter = ("team", "role")

    def save_model(self, request: HttpRequest, obj: Member, form: Any, change: bool) -> None:
        """A member moved to another team here loses their keys on the old team's
        applications, as everywhere else (accounts.services.member_team_move)."""
        super().save_model(request, obj, form, change)
        if change and "team" in form.changed_data:
            member_keys_outside_team_revoke(
                actor=Actor.of(viewer_for(request.user), via=AdminAction.Via.CONSOLE), member=obj
            )


@admin.register(Application)
class ApplicationAdmin(admin.ModelAdmin):
    """The routes it may call are picked here too: routing/admin.py adds them (the grant is
    routing's, which accounts does not import)."""

    list_display = (
        "slug",
        "name",
        "team",
        "default_priority",
        "batch_windows",
        "cache_ttl_seconds",
    )


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are issued with `manage.py issue_key` (the only place the secret is shown);
    here they can be read, renamed and revoked."""

    list_display = (
        "prefix",
        "name",
        "member",
        "application",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    list_filter = ("application", "revoked_at")
    readonly_fields = (
        "prefix",
        "secret_hash",
        "member",
        "application",
        "created_at",
        "last_used_at",
    )
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: object) -> None:
        from django.utils import timezone

        from core.refresh import KEYS, invalidate

        live = queryset.filter(revoked_at=None)  # type: ignore[attr-defined]
        prefixes = list(live.values_list("prefix", flat=True))
        live.update(revoked_at=timezone.now())  # no save signal: tell the workers here
        invalidate(*(f"{KEYS}:prefix={prefix}" for prefix in prefixes))


@admin.register(AdminAction)
class AdminActionAdmin(admin.ModelAdmin):
    """Read-only: the log is append-only, written by the services."""

    list_display = ("at", "actor_label", "via", "action", "object_type", "object_repr")
    list_filter = ("via", "action", "object_type")
    search_fields = ("actor_label", "object_repr")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(ManagementToken)
class ManagementTokenAdmin(admin.ModelAdmin):
    """Tokens are made with `manage.py issue_admin_token` or from the console session (the
    only places the secret is shown); here they can be read and revoked."""

    list_display = ("prefix", "name", "user", "team", "created_at", "expires_at", "revoked_at")
    list_filter = ("team", "revoked_at")
    readonly_fields = (
        "prefix",
        "secret_hash",
        "user",
        "team",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: object) -> None:
        from accounts.selectors import viewer_for
        from accounts.services import Actor, management_token_revoke

        actor = Actor.of(viewer_for(request.user), via="console")
        for token in queryset.filter(revoked_at=None):  # type: ignore[attr-defined]
            management_token_revoke(actor=actor, prefix=token.prefix)


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(SsoConfig)
class SsoConfigAdmin(_ReadOnly):
    """Read-only: the config file's [sso] table is the one place it is set (docs/sso.md)."""

    list_display = ("issuer", "client_id", "enabled", "password_login", "updated_at")


@admin.register(SsoIdentity)
class SsoIdentityAdmin(_ReadOnly):
    """Who signs in through the provider, and when last (what `manage.py sso_sweep` reads)."""

    list_display = ("user", "subject", "issuer", "last_login_at")
    search_fields = ("user__email", "subject")
