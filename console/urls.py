from django.contrib.auth import views as auth_views
from django.urls import path

from accounts.login_guard import login_throttled
from console import (
    views,
    views_calls,
    views_config,
    views_deployments,
    views_keys,
    views_limits,
    views_reports,
    views_sso,
)
from console import views_batches as batches
from console import views_people as people

app_name = "console"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("board/", views.board, name="board"),
    path("alerts/", views.alerts, name="alerts"),
    # Django's own authentication views, with our templates (templates/registration/).
    path(
        "login/",
        login_throttled(views_sso.SluiceLoginView.as_view()),
        name="login",
    ),
    path("sso/login/", views_sso.sso_start, name="sso_start"),
    path("sso/callback/", views_sso.sso_callback, name="sso_callback"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "password/",
        auth_views.PasswordChangeView.as_view(success_url="/password/done/"),
        name="password_change",
    ),
    path("password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_done"),
    path("keys/", views_keys.key_list, name="keys"),
    path("keys/new/", views_keys.key_create_view, name="key_create"),
    path("keys/<str:prefix>/revoke/", views_keys.key_revoke_view, name="key_revoke"),
    path("keys/<str:prefix>/rotate/", views_keys.key_rotate_view, name="key_rotate"),
    path("teams/", people.team_list, name="teams"),
    path("teams/new/", people.team_create_view, name="team_create"),
    path("teams/<slug:slug>/", people.team_edit_view, name="team_edit"),
    path("members/", people.member_list, name="members"),
    path("members/new/", people.member_create_view, name="member_create"),
    path("members/<int:pk>/", people.member_edit_view, name="member_edit"),
    path(
        "members/<int:pk>/deactivate/",
        people.member_active_view,
        {"active": False},
        name="member_deactivate",
    ),
    path(
        "members/<int:pk>/activate/",
        people.member_active_view,
        {"active": True},
        name="member_activate",
    ),
    path("applications/", people.application_list, name="applications"),
    path("applications/new/", people.application_create_view, name="application_create"),
    path("applications/<slug:slug>/", people.application_edit_view, name="application_edit"),
    path("limits/", views_limits.limit_list, name="limits"),
    path("limits/edit/", views_limits.limit_edit, name="limit_edit"),
    path("limits/clear/", views_limits.limit_clear, name="limit_clear"),
    path("deployments/", views_deployments.deployment_list, name="deployments"),
    path(
        "deployments/<slug:name>/drain/",
        views_deployments.deployment_drain_view,
        name="deployment_drain",
    ),
    path(
        "deployments/<slug:name>/undrain/",
        views_deployments.deployment_undrain_view,
        name="deployment_undrain",
    ),
    path(
        "deployments/<slug:name>/enable/",
        views_deployments.deployment_enable_view,
        {"enabled": True},
        name="deployment_enable",
    ),
    path(
        "deployments/<slug:name>/disable/",
        views_deployments.deployment_enable_view,
        {"enabled": False},
        name="deployment_disable",
    ),
    path("config/", views_config.config_page, name="config"),
    path("config/export.toml", views_config.config_download, name="config_download"),
    path("config/upload/", views_config.config_upload, name="config_upload"),
    path("usage/", views.usage, name="usage"),
    path("actions/", views.actions, name="actions"),
    path("reports/", views_reports.usage_report_view, name="report_usage"),
    path("reports/served/", views_reports.served_view, name="report_served"),
    path("reports/weather/", views_reports.weather_view, name="report_weather"),
    path("reports/weather/use/", batches.weather_window_use, name="weather_window_use"),
    path("calls/", views_calls.call_list, name="calls"),
    path("calls/export.csv", views_calls.call_export, name="calls_export"),
    path("calls/<str:request_id>/", views_calls.call_detail, name="call_detail"),
    path("batches/", batches.batch_list, name="batches"),
    path("batches/<str:batch_id>/", batches.batch_detail, name="batch_detail"),
    path("batches/<str:batch_id>/cancel/", batches.batch_cancel_view, name="batch_cancel"),
]
