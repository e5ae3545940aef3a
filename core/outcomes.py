"""How a call ended, as the audit trail records it (a choice of `CallRecord.outcome`)."""

from django.db import models


class Outcome(models.TextChoices):
    SUCCESS = "success"
    INVALID_REQUEST = "invalid_request"  # refused by Sluice before any upstream call
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    CAPACITY_EXHAUSTED = "capacity_exhausted"
    UPSTREAM_CLIENT_ERROR = "upstream_client_error"  # the upstream refused the request as bad
    UPSTREAM_ERROR = "upstream_error"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    CLIENT_CANCELLED = "client_cancelled"
    PREEMPTED = "preempted"  # a batch line's call gave its slot to an interactive call: runs again
    RATE_LIMITED = "rate_limited"  # refused by Sluice's own limits, before any upstream
    BUDGET_EXCEEDED = "budget_exceeded"
    CONCURRENCY_LIMITED = "concurrency_limited"
    DATABASE_UNAVAILABLE = "database_unavailable"  # Sluice's database did not answer in time
    INTERNAL_ERROR = "internal_error"
