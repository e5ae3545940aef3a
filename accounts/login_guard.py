"""Password guessing: every login form (the console's /login/ and the Django admin's
/admin/login/) is throttled per client address and per account with django-ratelimit, and
every failed login is logged (the address and the account tried, never the password).

A POST past either limit is answered 429 (a page saying when to try again, with
Retry-After) without checking the password, and logged once per refusal. Counts live in
the "ratelimit" cache: shared by every worker with Redis, per worker without (docs/quotas.md).
"""

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django_ratelimit.core import get_usage

log = logging.getLogger("sluice.auth")

View = Callable[..., HttpResponse]


def _account(group: str, request: HttpRequest) -> str:
    return request.POST.get("username", "").strip().lower()[:254]


def _address(request: HttpRequest) -> str:
    return request.META.get("REMOTE_ADDR", "") or "unknown"


def login_refusal(request: HttpRequest) -> HttpResponse | None:
    """Count this login attempt; a 429 page when the address or the account is over its
    rate (SLUICE_LOGIN_RATE_ADDRESS, SLUICE_LOGIN_RATE_ACCOUNT), else None."""
    waits = []
    limits: tuple[tuple[str, str | Callable[[str, HttpRequest], str], str], ...] = (
        ("login:address", "ip", settings.SLUICE_LOGIN_RATE_ADDRESS),
        ("login:account", _account, settings.SLUICE_LOGIN_RATE_ACCOUNT),
    )
    for group, key, rate in limits:
        usage = get_usage(
            request, group=group, key=key, rate=rate, method=("POST",), increment=True
        )
        if usage is not None and usage["should_limit"]:
            waits.append(int(usage["time_left"]) + 1)
    if not waits:
        return None
    wait = max(waits)
    log.warning(
        "login throttled: address=%s account=%r (retry in %d s)",
        _address(request),
        _account("", request),
        wait,
    )
    page = render_to_string("registration/throttled.html", {"wait": wait}, request=request)
    response = HttpResponse(page, status=429)
    response["Retry-After"] = str(wait)
    return response


def login_throttled(view: View) -> View:
    """Wrap a login view: POSTs are counted and refused past the rates."""

    @wraps(view)
    def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "POST":
            refused = login_refusal(request)
            if refused is not None:
                return refused
        return view(request, *args, **kwargs)

    return run


@receiver(user_login_failed)
def _log_failed_login(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    """One line per failed login. Django has already masked the password in
    `credentials`; only the account name is written anyway."""
    account = str(credentials.get("username", ""))[:254]
    address = _address(request) if request is not None else "-"
    log.warning("login failed: address=%s account=%r", address, account)
