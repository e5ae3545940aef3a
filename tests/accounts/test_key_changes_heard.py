"""Every change to what a worker caches about a key tells the workers, so none has to wait
out a time to live (with Redis, a worker that hears every change keeps values for
SLUICE_CACHE_TRUSTED_SECONDS): the Django admin's bulk revoke and a user deactivated, not
only a saved key or member."""

import uuid

import pytest
from django.contrib import admin
from django.test import RequestFactory
from django.utils import timezone

from accounts.admin import ApiKeyAdmin
from accounts.models import ApiKey, Application, Team
from accounts.services import key_issue, member_ensure
from core import refresh
from core.refresh import KEYS


@pytest.fixture
def heard(monkeypatch):
    """The selectors of every `keys` change this process hears."""
    words: list[str | None] = []
    monkeypatch.setitem(refresh._hooks, KEYS, [words.append])
    return words


@pytest.fixture
def member_with_keys(db):
    team = Team.objects.create(slug=f"heard-{uuid.uuid4().hex[:8]}", name="Heard")
    app = Application.objects.create(team=team, slug=f"app-{uuid.uuid4().hex[:8]}", name="App")
    member = member_ensure(email=f"m-{uuid.uuid4().hex[:8]}@example.com", team=team)
    keys = [key_issue(member_email=member.user.email, application_slug=app.slug)[0] for _ in "ab"]
    return member, keys


def test_the_admins_bulk_revoke_names_each_key_it_revokes(
    member_with_keys, heard, django_capture_on_commit_callbacks
):
    _, (first, second) = member_with_keys
    ApiKey.objects.filter(pk=second.pk).update(revoked_at=timezone.now())  # revoked before
    heard.clear()
    request = RequestFactory().post("/admin/accounts/apikey/")
    with django_capture_on_commit_callbacks(execute=True):
        ApiKeyAdmin(ApiKey, admin.site).revoke(
            request, ApiKey.objects.filter(pk__in=[first.pk, second.pk])
        )
    assert heard == [f"prefix={first.prefix}"]
    assert ApiKey.objects.get(pk=first.pk).revoked_at is not None


def test_a_deactivated_user_names_their_members_keys(
    member_with_keys, heard, django_capture_on_commit_callbacks
):
    member, _ = member_with_keys
    heard.clear()
    user = member.user
    user.is_active = False
    with django_capture_on_commit_callbacks(execute=True):
        user.save(update_fields=["is_active"])
    assert heard == [f"member={member.pk}"]


def test_a_sign_in_changes_nothing_cached(
    member_with_keys, heard, django_capture_on_commit_callbacks
):
    member, _ = member_with_keys
    heard.clear()
    user = member.user
    user.last_login = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        user.save(update_fields=["last_login"])
    assert heard == []
