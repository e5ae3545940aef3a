"""Limits per key, application, member or team, and the hourly and daily usage they are read
against."""

from django.db import models


class Scope(models.TextChoices):
    KEY = "key", "API key"
    APPLICATION = "application", "Application"
    MEMBER = "member", "Member"
    TEAM = "team", "Team"


class Limit(models.Model):
    """The limits of one key, application, member or team. Empty means no limit."""

    scope = models.CharField(max_length=16, choices=Scope.choices)
    api_key = models.OneToOneField(
        "accounts.ApiKey", null=True, blank=True, on_delete=models.CASCADE, related_name="limit"
    )
    application = models.OneToOneField(
        "accounts.Application",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="limit",
    )
    member = models.OneToOneField(
        "accounts.Member", null=True, blank=True, on_delete=models.CASCADE, related_name="limit"
    )
    team = models.OneToOneField(
        "accounts.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="limit"
    )
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_day = models.PositiveBigIntegerField(null=True, blank=True)
    tokens_per_month = models.PositiveBigIntegerField(null=True, blank=True)
    cost_per_month = models.DecimalField(max_digits=14, decimal_places=4, null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                name="limit_has_one_target",
                condition=(
                    models.Q(
                        scope="key", api_key__isnull=False, application=None, member=None, team=None
                    )
                    | models.Q(
                        scope="application",
                        application__isnull=False,
                        api_key=None,
                        member=None,
                        team=None,
                    )
                    | models.Q(
                        scope="member",
                        member__isnull=False,
                        api_key=None,
                        application=None,
                        team=None,
                    )
                    | models.Q(
                        scope="team",
                        team__isnull=False,
                        api_key=None,
                        application=None,
                        member=None,
                    )
                ),
            )
        ]

    def __str__(self) -> str:
        target = self.api_key or self.application or self.member or self.team
        return f"{self.scope} {target}"


# Upper bounds (ms) of the latency histogram kept per rollup row; the last bucket is open.
# Percentiles over any period are read from these counts, so they need no call rows.
LATENCY_BUCKETS_MS = (100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, None)
LATENCY_FIELDS = tuple(f"latency_le_{b}ms" if b else "latency_over" for b in LATENCY_BUCKETS_MS)


def latency_field(latency_ms: float) -> str:
    """The histogram column a call of this latency is counted in."""
    for bound, name in zip(LATENCY_BUCKETS_MS, LATENCY_FIELDS, strict=True):
        if bound is None or latency_ms <= bound:
            return name
    return LATENCY_FIELDS[-1]


class RollupCounts(models.Model):
    """What a usage rollup row keeps: who (key, route, deployment; the member, application
    and team the key belonged to) and the counters. The hourly and the daily rollup share it
    so their columns never drift apart."""

    key_prefix = models.CharField(max_length=40)
    route = models.CharField(max_length=200, default="")  # the model the calls asked for
    deployment = models.CharField(max_length=50)  # "" for calls no deployment served
    member_id = models.BigIntegerField(null=True)
    application_id = models.BigIntegerField(null=True)
    team_id = models.BigIntegerField(null=True)
    requests = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=18, decimal_places=8, default=0)
    fallbacks = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    capacity_errors = models.PositiveIntegerField(default=0)
    rate_limit_errors = models.PositiveIntegerField(default=0)
    server_errors = models.PositiveIntegerField(default=0)
    timeouts = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)  # refused by Sluice's own limits
    # Latency of the calls that reached an upstream, as a histogram (LATENCY_BUCKETS_MS).
    latency_le_100ms = models.PositiveIntegerField(default=0)
    latency_le_250ms = models.PositiveIntegerField(default=0)
    latency_le_500ms = models.PositiveIntegerField(default=0)
    latency_le_1000ms = models.PositiveIntegerField(default=0)
    latency_le_2500ms = models.PositiveIntegerField(default=0)
    latency_le_5000ms = models.PositiveIntegerField(default=0)
    latency_le_10000ms = models.PositiveIntegerField(default=0)
    latency_le_30000ms = models.PositiveIntegerField(default=0)
    latency_le_60000ms = models.PositiveIntegerField(default=0)
    latency_over = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


# The counters a rollup row adds up (the rest of RollupCounts names whose they are).
ROLLUP_COUNTS = (
    "requests",
    "tokens_in",
    "tokens_out",
    "cost",
    "fallbacks",
    "errors",
    "capacity_errors",
    "rate_limit_errors",
    "server_errors",
    "timeouts",
    "rejected",
    *LATENCY_FIELDS,
)


class UsageRollup(RollupCounts):
    """Usage per hour, key, route and deployment; applications, members and teams add up
    from it.
    Written by the audit writer with atomic upserts, so several workers lose no update."""

    hour = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "key_prefix", "route", "deployment"],
                name="rollup_hour_key_route_deployment",
            )
        ]
        indexes = [
            models.Index(fields=["member_id", "hour"], name="rollup_member_hour"),
            models.Index(fields=["application_id", "hour"], name="rollup_app_hour"),
            models.Index(fields=["team_id", "hour"], name="rollup_team_hour"),
            # A key's usage this day/month (the gateway's key limits, the console's Limits).
            models.Index(fields=["key_prefix", "hour"], name="rollup_key_hour"),
        ]


class DailyUsageRollup(RollupCounts):
    """The hourly rollup added up per UTC day: the same rows 24 times fewer, for reports
    over weeks, months and years (reports/usage.py reads whole UTC days here and the
    ragged edges of a period from the hourly rows). Written by the audit writer in the same
    transaction as the hourly row, so a day is always the sum of its hours."""

    day = models.DateField()  # the UTC day

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "key_prefix", "route", "deployment"],
                name="daily_rollup_day_key_route_deployment",
            )
        ]
        indexes = [
            models.Index(fields=["member_id", "day"], name="daily_rollup_member_day"),
            models.Index(fields=["application_id", "day"], name="daily_rollup_app_day"),
            models.Index(fields=["team_id", "day"], name="daily_rollup_team_day"),
        ]
