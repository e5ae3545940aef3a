from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny
from rest_framework.routers import DefaultRouter

from api import views_accounts, views_reports, views_routing

router = DefaultRouter()
router.trailing_slash = "/?"  # with or without the final slash
router.include_root_view = False
router.register("teams", views_accounts.TeamViewSet, basename="team")
router.register("members", views_accounts.MemberViewSet, basename="member")
router.register("applications", views_accounts.ApplicationViewSet, basename="application")
router.register("keys", views_accounts.KeyViewSet, basename="key")
router.register("tokens", views_accounts.TokenViewSet, basename="token")
router.register("admin-actions", views_accounts.AdminActionViewSet, basename="admin-action")
router.register("deployments", views_routing.DeploymentViewSet, basename="deployment")
router.register("routes", views_routing.RouteViewSet, basename="route")
router.register("calls", views_reports.CallViewSet, basename="call")

_public = {"authentication_classes": [], "permission_classes": [AllowAny]}

urlpatterns = [
    path("calls/agents/", views_reports.CallAgents.as_view(), name="call-agents"),
    path("", include(router.urls)),
    path("limits/", views_routing.LimitList.as_view(), name="limit-list"),
    path("limits/<str:scope>/<str:name>/", views_routing.LimitDetail.as_view(), name="limit"),
    path("calls/", views_reports.CallList.as_view(), name="call-list"),
    path("usage/", views_reports.UsageReportView.as_view(), name="usage"),
    path("config/", views_routing.ConfigExport.as_view(), name="config-export"),
    path("config/dry-run/", views_routing.ConfigDryRun.as_view(), name="config-dry-run"),
    path("config/apply/", views_routing.ConfigApply.as_view(), name="config-apply"),
    path("schema/", SpectacularAPIView.as_view(**_public), name="api-schema"),
    path(
        "docs/", SpectacularSwaggerView.as_view(url_name="api-schema", **_public), name="api-docs"
    ),
    path(
        "redoc/",
        SpectacularRedocView.as_view(
            url_name="api-schema", template_name="api/redoc.html", **_public
        ),
        name="api-redoc",
    ),
    # Anything else under /api/v1/ is a 404 in the API's error shape, not an HTML page.
    re_path(r"^.*$", views_accounts.not_found),
]
