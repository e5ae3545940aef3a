from django.contrib import admin

from quotas.models import DailyUsageRollup, Limit, UsageRollup
from quotas.services import LIMIT_FIELDS


@admin.register(Limit)
class LimitAdmin(admin.ModelAdmin):
    list_display = ("__str__", *LIMIT_FIELDS, "updated_at")
    list_filter = ("scope",)


@admin.register(UsageRollup)
class UsageRollupAdmin(admin.ModelAdmin):
    list_display = (
        "hour",
        "key_prefix",
        "deployment",
        "requests",
        "tokens_in",
        "tokens_out",
        "cost",
        "fallbacks",
        "errors",
        "rejected",
    )
    list_filter = ("deployment",)
    date_hierarchy = "hour"

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(DailyUsageRollup)
class DailyUsageRollupAdmin(UsageRollupAdmin):
    list_display = ("day", *UsageRollupAdmin.list_display[1:])
    date_hierarchy = "day"
