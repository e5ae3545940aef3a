from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import FilteredSelectMultiple
from django.http import HttpRequest

from accounts.admin import ApplicationAdmin
from accounts.models import Application
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
        "http2",
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
    exclude = ("applications",)  # granted on the application's page


class ApplicationForm(forms.ModelForm):
    routes = forms.ModelMultipleChoiceField(
        Route.objects.all(),
        required=False,
        widget=FilteredSelectMultiple("routes", is_stacked=False),
    )

    class Meta:
        model = Application
        fields = "__all__"

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        if self.instance.pk:
            self.fields["routes"].initial = self.instance.routes.all()


# The application's page as before, with the routes it may call: the grant is a field of
# Route (routing owns it), so the picker is added from this side.
admin.site.unregister(Application)


@admin.register(Application)
class ApplicationWithRoutesAdmin(ApplicationAdmin):
    form = ApplicationForm

    def save_related(
        self, request: HttpRequest, form: ApplicationForm, formsets: object, change: bool
    ) -> None:
        super().save_related(request, form, formsets, change)
        form.instance.routes.set(form.cleaned_data["routes"])


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
