"""Console sign-in through the team's OpenID provider (docs/sso.md): /sso/login/ sends the
browser to the provider, /sso/callback/ checks its answer, applies the groups
(accounts/sso_services.py) and logs the user in. Every refusal is a page saying what
failed and what to do, never a stack trace or a token."""

import logging

from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.views import LoginView
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET

from accounts.models import SsoConfig
from accounts.selectors import sso_config
from accounts.sso_client import authorize_redirect, provider_account
from accounts.sso_services import SignInRefused, sso_sign_in
from console.access import safe_next
from console.forms import LoginForm

log = logging.getLogger("sluice.auth")

_NEXT = "sso_next"  # where the sign-in was headed, kept in the session across the provider


class SluiceLoginView(LoginView):
    """Django's login page, with the provider's button; the password form folds away when
    only break-glass accounts may use it."""

    authentication_form = LoginForm
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: object) -> dict[str, object]:
        context = super().get_context_data(**kwargs)
        config = sso_config()
        context["sso"] = config
        context["password_folded"] = (
            config is not None and config.password_login == SsoConfig.PasswordLogin.BREAK_GLASS
        )
        return context


def _configured() -> SsoConfig:
    config = sso_config()
    if config is None:
        raise Http404("Single sign-on is not configured.")
    return config


def _refusal(request: HttpRequest, refused: SignInRefused) -> HttpResponse:
    return render(
        request,
        "registration/sso_refused.html",
        {"title": refused.title, "detail": refused.detail},
        status=refused.status,
    )


@require_GET
def sso_start(request: HttpRequest) -> HttpResponse:
    config = _configured()
    request.session[_NEXT] = safe_next(request, request.GET.get("next", ""))
    callback = config.redirect_uri or request.build_absolute_uri(reverse("console:sso_callback"))
    # "Sign in as someone else" (the refusal page): the provider asks again, whoever its
    # session says is signed in.
    prompt = "login" if request.GET.get("prompt") == "login" else None
    try:
        return authorize_redirect(request, config, callback, prompt=prompt)
    except SignInRefused as refused:
        return _refusal(request, refused)


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    config = _configured()
    try:
        account = provider_account(request, config)
        user = sso_sign_in(account=account, config=config)
    except SignInRefused as refused:
        return _refusal(request, refused)
    goto = safe_next(request, request.session.pop(_NEXT, ""))
    login(request, user, backend="accounts.password_backend.PasswordBackend")
    log.info("sso sign-in: %s (groups: %s)", user.email, ", ".join(account.groups) or "none")
    return redirect(goto or settings.LOGIN_REDIRECT_URL)
