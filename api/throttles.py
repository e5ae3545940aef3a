"""Throttling of the management API itself, per token or per console user. Counted in the
"api" cache: Redis when REDIS_URL is set, so every worker shares the count."""

from django.core.cache import caches
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from accounts.models import ManagementToken


class CallerThrottle(SimpleRateThrottle):
    scope = "caller"

    def __init__(self) -> None:
        self.cache = caches["api"]
        super().__init__()

    def get_cache_key(self, request: Request, view: object) -> str | None:
        if isinstance(request.auth, ManagementToken):
            ident = f"token:{request.auth.prefix}"
        elif request.user is not None and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        return f"api-throttle:{ident}"
