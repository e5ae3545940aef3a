"""The Django admin is the console until the real one comes: its pages must render."""

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from accounts.models import ApiKey, Team
from accounts.services import key_issue, member_ensure
from routing.catalog.config_file import apply_config, load_config
from routing.observability.audit import AttemptLog, CallLog, _insert

PAGES = [
    "/admin/",
    "/admin/accounts/team/",
    "/admin/accounts/member/",
    "/admin/accounts/application/",
    "/admin/accounts/apikey/",
    "/admin/routing/upstream/",
    "/admin/routing/deployment/",
    "/admin/routing/route/",
    "/admin/routing/callrecord/",
    "/admin/quotas/limit/",
    "/admin/quotas/usagerollup/",
]


@pytest.fixture
def admin_client(client):
    apply_config(load_config("config/demo.toml"))
    user = get_user_model().objects.create_superuser("root@example.com", "root@example.com", "pw")
    client.force_login(user)
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("path", PAGES)
def test_admin_page_renders(admin_client, path):
    assert admin_client.get(path).status_code == 200


@pytest.mark.django_db
def test_call_record_page_shows_its_attempts(admin_client):
    call = CallLog(request_id="req_admin_test", endpoint="chat/completions", client_ip="127.0.0.1")
    call.attempts.append(
        AttemptLog(
            number=1,
            deployment="big",
            started_at=timezone.now(),
            status_code=503,
            error_class="capacity",
        )
    )
    call.finish(outcome="capacity_exhausted", status=503)
    _insert([call])
    page = admin_client.get("/admin/routing/callrecord/req_admin_test/change/")
    assert page.status_code == 200
    assert b"capacity" in page.content


@pytest.mark.django_db
def test_admin_revoke_action_revokes_the_key(admin_client):
    member_ensure(email="x@example.com", team=Team.objects.get(slug="demo"))
    key, _ = key_issue(member_email="x@example.com", application_slug="demo")
    response = admin_client.post(
        "/admin/accounts/apikey/",
        {"action": "revoke", "_selected_action": [key.pk]},
    )
    assert response.status_code == 302
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None


@pytest.mark.django_db
def test_application_page_grants_routes(admin_client):
    from accounts.models import Application
    from routing.models import Route

    app = Application.objects.get(slug="demo")
    page = admin_client.get(f"/admin/accounts/application/{app.pk}/change/")
    assert page.status_code == 200
    granted = set(app.routes.values_list("pk", flat=True))
    assert granted
    for route in Route.objects.all():
        selected = f'<option value="{route.pk}" selected>' in page.content.decode()
        assert selected == (route.pk in granted), route.name

    keep = Route.objects.order_by("name").first()
    response = admin_client.post(
        f"/admin/accounts/application/{app.pk}/change/",
        {
            "team": app.team_id,
            "slug": app.slug,
            "name": app.name,
            "default_priority": app.default_priority,
            "fallback": app.fallback,
            "default_max_tokens": app.default_max_tokens,
            "clamp_max_tokens": "on",
            "cache_ttl_seconds": 0,
            "routes": [keep.pk],
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(app.routes.values_list("pk", flat=True)) == [keep.pk]
