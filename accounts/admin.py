from django.contrib import admin
from django.http import HttpRequest

from accounts.models import ApiKey, Application, Member, Team


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "time_zone")


@admin.register(Member)
class MemberAdmin(admin.ModelAdmin):
    list_display = ("user", "team", "role")
    list_filter = ("team", "role")


@admin.register(Application)
class ApplicationAdmin(admin.ModelAdmin):
    """The routes it may call are picked here too: routing/admin.py adds them (the grant is
    routing's, which accounts does not import)."""

    list_display = ("slug", "name", "team", "default_priority")


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

        queryset.filter(revoked_at=None).update(revoked_at=timezone.now())  # type: ignore[attr-defined]
