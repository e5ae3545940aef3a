"""Throttling of the management API itself, per token or per console user. DRF counts in
the default cache: Redis when REDIS_URL is set, so every worker shares the count."""

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import ManagementToken


class CallerThrottle(SimpleRateThrottle):
    scope = "caller"

    def get_cache_key(self, request: Request, view: object) -> str | None:
        if isinstance(request.auth, ManagementToken):
            ident = f"token:{request.auth.prefix}"
        elif request.user is not None and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        return f"{settings.SLUICE_REDIS_PREFIX}:api-throttle:{ident}"
