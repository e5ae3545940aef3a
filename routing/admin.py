from django.contrib import admin

from routing.models import Attempt, CallRecord, Deployment, Route, RouteDeployment, Upstream


@admin.register(Upstream)
class UpstreamAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "kind",
        "base_url",
        "api_key_env",
        "connect_timeout",
        "read_timeout",
        "forward_openai_headers",
    )


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "upstream",
        "model",
        "tier",
        "max_concurrency",
        "context_window",
        "enabled",
    )
    list_filter = ("upstream", "tier", "enabled")


class ChainInline(admin.TabularInline):
    model = RouteDeployment
    extra = 0
    ordering = ("position",)


@admin.register(Route)
class RouteAdmin(admin.ModelAdmin):
    list_display = ("name",)
    inlines = (ChainInline,)


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    readonly_fields = (
        "number",
        "deployment",
        "started_at",
        "duration_ms",
        "status_code",
        "error_class",
    )


@admin.register(CallRecord)
class CallRecordAdmin(admin.ModelAdmin):
    """The audit trail: read only."""

    list_display = (
        "request_id",
        "created_at",
        "member_email",
        "application_slug",
        "requested_model",
        "served_deployment",
        "outcome",
        "status_code",
        "tokens_in",
        "tokens_out",
        "latency_ms",
    )
    list_filter = ("outcome", "served_deployment", "application_slug")
    search_fields = ("request_id", "member_email", "key_prefix")
    date_hierarchy = "created_at"
    inlines = (AttemptInline,)

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: object, obj: object = None) -> bool:
        return False

    def get_readonly_fields(self, request: object, obj: object = None) -> list[str]:
        return [f.name for f in CallRecord._meta.fields]
