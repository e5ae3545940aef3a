"""A console page (or the Django admin) whose database does not answer: a 503 page saying
so, with Retry-After, instead of a 500. The proxy and the management API answer the same
outage in their JSON shape (core/db.py, api/errors.py)."""

import logging

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.utils.deprecation import MiddlewareMixin

from core.errors import DATABASE_RETRY_AFTER

log = logging.getLogger("sluice.console")


class DatabaseUnavailableMiddleware(MiddlewareMixin):
    """Sync and async alike (MiddlewareMixin), so the handler stays async under ASGI."""

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not isinstance(exc, DatabaseError):
            return None
        log.warning("console %s: the database failed: %s", request.path, type(exc).__name__)
        # Rendered without a request: the context processors would ask the database again.
        page = render_to_string("console/unavailable.html", {"wait": DATABASE_RETRY_AFTER})
        response = HttpResponse(page, status=503)
        response["Retry-After"] = str(DATABASE_RETRY_AFTER)
        return response
