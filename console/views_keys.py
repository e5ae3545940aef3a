"""Keys: a member's own, or every key in an admin's scope; create (shown once), revoke,
rotate with a grace period."""

from datetime import timedelta

from django.contrib import messages
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from accounts.models import Member
from accounts.selectors import (
    KEY_STATES,
    applications_visible_to,
    keys_in_state,
    keys_visible_to,
    members_visible_to,
)
from accounts.services import AccountError, key_create, key_revoke, key_rotate
from console.access import actor_of, console_view, viewer_of
from console.forms import KeyCreateForm, KeyRotateForm
from console.tables import Column, table

KEY_COLUMNS = [
    Column("name", "Name", "name"),
    Column("prefix", "Prefix", "prefix"),
    Column("member", "Member", "member__user__email"),
    Column("application", "Application", "application__slug"),
    Column("created", "Created", "created_at"),
    Column("last_used", "Last used", "last_used_at"),
    Column("expires", "Expires", "expires_at"),
    Column("state", "State"),
    Column("actions", ""),
]
STATES = (*KEY_STATES, "all")


@console_view()
def key_list(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    qs = keys_visible_to(viewer)
    state = request.GET.get("state", "active")
    state = state if state in STATES else "active"
    now = timezone.now()
    if state != "all":
        qs = keys_in_state(qs, state, now=now)
    q = request.GET.get("q", "").strip()
    if q:
        qs = qs.filter(
            Q(prefix__icontains=q) | Q(name__icontains=q) | Q(member__user__email__icontains=q)
        )
    t = table(request, qs, KEY_COLUMNS, default_sort="-created")
    return render(
        request,
        "console/keys/list.html",
        {"table": t, "state": state, "states": STATES, "q": q, "now": now},
    )


def _create_form(request: HttpRequest, data: dict | None = None) -> KeyCreateForm:
    viewer = viewer_of(request)
    return KeyCreateForm(
        data,
        applications=applications_visible_to(viewer),
        members=members_visible_to(viewer).filter(user__is_active=True)
        if viewer.can_manage
        else None,
    )


@never_cache
@console_view()
def key_create_view(request: HttpRequest) -> HttpResponse:
    viewer = viewer_of(request)
    form = _create_form(request, request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        member = form.cleaned_data.get("member")
        if member is None:
            member = (
                Member.objects.select_related("user", "team").filter(pk=viewer.member_id).first()
            )
        if member is None:
            form.add_error("member", "Choose whose key it is: you are not a member of a team.")
        else:
            days = form.cleaned_data["expires_days"]
            try:
                key, plaintext = key_create(
                    actor=actor_of(request),
                    member=member,
                    application=form.cleaned_data["application"],
                    name=form.cleaned_data["name"],
                    expires_at=timezone.now() + timedelta(days=days) if days else None,
                )
            except AccountError as exc:
                form.add_error(None, str(exc))
            else:
                # The only time the whole key is shown: rendered into this response, never
                # stored in the session or a message.
                return render(
                    request, "console/keys/created.html", {"key": key, "plaintext": plaintext}
                )
    return render(request, "console/keys/create.html", {"form": form})


@require_POST
@console_view()
def key_revoke_view(request: HttpRequest, prefix: str) -> HttpResponse:
    key = get_object_or_404(keys_visible_to(viewer_of(request)), prefix=prefix)
    key_revoke(prefix=key.prefix, actor=actor_of(request))
    messages.success(request, f"Key {key.prefix} is revoked; it stops working within seconds.")
    return redirect("console:keys")


@never_cache
@console_view()
def key_rotate_view(request: HttpRequest, prefix: str) -> HttpResponse:
    key = get_object_or_404(keys_visible_to(viewer_of(request)), prefix=prefix)
    form = KeyRotateForm(request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        try:
            new_key, plaintext = key_rotate(
                actor=actor_of(request), key=key, grace=form.cleaned_data["grace"]
            )
        except AccountError as exc:
            form.add_error(None, str(exc))
        else:
            key.refresh_from_db()
            return render(
                request,
                "console/keys/created.html",
                {"key": new_key, "plaintext": plaintext, "rotated": key},
            )
    return render(request, "console/keys/rotate.html", {"form": form, "key": key})
