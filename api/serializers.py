"""Input checks and output shapes; no business rules (those are in the services)."""

from typing import Any

from django.utils import timezone
from rest_framework import serializers

from accounts.models import (
    AdminAction,
    ApiKey,
    Application,
    Fallback,
    Member,
    PriorityClass,
    Team,
)
from accounts.services import APPLICATION_FIELDS
from accounts.validators import APPLICATION_RANGES, NAME_MAX_LENGTH, SLUG_MAX_LENGTH, SLUG_REGEX
from quotas.validators import COST_DECIMALS, LIMIT_MAX, MAX_COST
from routing.models import Outcome


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know (a typo must not be silently ignored)."""

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if isinstance(self.initial_data, dict):
            unknown = sorted(set(self.initial_data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: "Unknown field." for name in unknown})
        return attrs


SLUG = {"max_length": SLUG_MAX_LENGTH, "regex": SLUG_REGEX}


def _bounds(name: str) -> dict[str, int]:
    """An application setting's bounds, as the services check them."""
    low, high = APPLICATION_RANGES[name]
    return {"min_value": low, "max_value": high}


# --- teams --------------------------------------------------------------------------------


class TeamOut(serializers.ModelSerializer):
    class Meta:
        model = Team
        fields = ["slug", "name", "time_zone"]


class TeamCreate(StrictSerializer):
    slug = serializers.RegexField(**SLUG)
    name = serializers.CharField(
        max_length=NAME_MAX_LENGTH, required=False, allow_blank=True, default=""
    )
    time_zone = serializers.CharField(max_length=64, required=False, default="UTC")


class TeamUpdate(StrictSerializer):
    name = serializers.CharField(max_length=NAME_MAX_LENGTH, required=False, allow_blank=True)
    time_zone = serializers.CharField(max_length=64, required=False)


# --- members ------------------------------------------------------------------------------


class MemberOut(serializers.ModelSerializer):
    email = serializers.EmailField(source="user.email")
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    active = serializers.BooleanField(source="user.is_active")

    class Meta:
        model = Member
        fields = ["id", "email", "team", "role", "active"]


class MemberCreate(StrictSerializer):
    email = serializers.EmailField(max_length=254)
    team = serializers.RegexField(**SLUG)
    role = serializers.ChoiceField(choices=Member.Role.choices, default=Member.Role.MEMBER)
    password = serializers.CharField(
        max_length=128, required=False, allow_blank=True, default="", write_only=True
    )


class MemberUpdate(StrictSerializer):
    role = serializers.ChoiceField(choices=Member.Role.choices, required=False)
    active = serializers.BooleanField(required=False)


# --- applications -------------------------------------------------------------------------


class ApplicationOut(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    routes = serializers.SerializerMethodField()

    class Meta:
        model = Application
        fields = list(APPLICATION_FIELDS)

    def get_routes(self, app: Application) -> list[str]:
        return sorted(r.name for r in app.routes.all())


class _ApplicationFields(StrictSerializer):
    name = serializers.CharField(max_length=NAME_MAX_LENGTH, required=False, allow_blank=True)
    routes = serializers.ListField(
        child=serializers.CharField(max_length=200), max_length=500, required=False
    )
    default_priority = serializers.ChoiceField(choices=PriorityClass.choices, required=False)
    fallback = serializers.ChoiceField(choices=Fallback.choices, required=False)
    default_max_tokens = serializers.IntegerField(**_bounds("default_max_tokens"), required=False)
    max_tokens_ceiling = serializers.IntegerField(
        **_bounds("max_tokens_ceiling"), required=False, allow_null=True
    )
    clamp_max_tokens = serializers.BooleanField(required=False)
    max_n = serializers.IntegerField(**_bounds("max_n"), required=False, allow_null=True)
    cache_ttl_seconds = serializers.IntegerField(**_bounds("cache_ttl_seconds"), required=False)
    batch_windows = serializers.CharField(
        max_length=200,
        required=False,
        allow_blank=True,
        help_text='When its batches may run, in its team\'s time zone: "00:00-06:00" (several '
        'comma separated), "any", or blank to follow the team.',
    )


class ApplicationCreate(_ApplicationFields):
    team = serializers.RegexField(**SLUG)
    slug = serializers.RegexField(**SLUG)


class ApplicationUpdate(_ApplicationFields):
    pass


# --- keys ---------------------------------------------------------------------------------


class KeyOut(serializers.ModelSerializer):
    member = serializers.EmailField(source="member.user.email")
    application = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    state = serializers.SerializerMethodField()

    class Meta:
        model = ApiKey
        fields = [
            "prefix",
            "name",
            "member",
            "application",
            "state",
            "created_at",
            "expires_at",
            "revoked_at",
            "last_used_at",
        ]

    def get_state(self, key: ApiKey) -> str:
        if key.revoked_at is not None:
            return "revoked"
        if key.expires_at is not None and key.expires_at <= timezone.now():
            return "expired"
        return "active"


class IssuedKeyOut(KeyOut):
    key = serializers.CharField(help_text="The full key. Shown only in this response.")

    class Meta(KeyOut.Meta):
        fields = [*KeyOut.Meta.fields, "key"]


class KeyCreate(StrictSerializer):
    application = serializers.RegexField(**SLUG)
    member = serializers.EmailField(
        max_length=254, required=False, help_text="Default: the caller (a member's own key)."
    )
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    expires_days = serializers.IntegerField(
        min_value=1, max_value=3650, required=False, allow_null=True
    )


class KeyRotate(StrictSerializer):
    grace_minutes = serializers.IntegerField(
        min_value=0,
        max_value=30 * 24 * 60,
        default=60,
        help_text="How long the old key keeps working (0: revoked at once).",
    )


# --- the admin actions log ----------------------------------------------------------------


class AdminActionOut(serializers.ModelSerializer):
    class Meta:
        model = AdminAction
        fields = [
            "id",
            "at",
            "actor_label",
            "via",
            "action",
            "object_type",
            "object_repr",
            "before",
            "after",
        ]


# --- limits -------------------------------------------------------------------------------


def _limit_int(name: str) -> serializers.IntegerField:
    """A limit's field with the bounds limit_set checks."""
    return serializers.IntegerField(
        min_value=0, max_value=LIMIT_MAX[name], required=False, allow_null=True
    )


class LimitValues(StrictSerializer):
    """Only the values given change; null leaves one as it is, 0 removes that one limit."""

    requests_per_minute = _limit_int("requests_per_minute")
    tokens_per_minute = _limit_int("tokens_per_minute")
    max_concurrency = _limit_int("max_concurrency")
    tokens_per_day = _limit_int("tokens_per_day")
    tokens_per_month = _limit_int("tokens_per_month")
    cost_per_month = serializers.DecimalField(
        max_digits=14,
        decimal_places=COST_DECIMALS,
        min_value=0,
        max_value=MAX_COST,
        required=False,
        allow_null=True,
        coerce_to_string=False,
    )


class LimitValuesOut(serializers.Serializer):
    requests_per_minute = serializers.IntegerField(allow_null=True)
    tokens_per_minute = serializers.IntegerField(allow_null=True)
    max_concurrency = serializers.IntegerField(allow_null=True)
    tokens_per_day = serializers.IntegerField(allow_null=True)
    tokens_per_month = serializers.IntegerField(allow_null=True)
    cost_per_month = serializers.DecimalField(
        max_digits=14, decimal_places=4, allow_null=True, coerce_to_string=True
    )


class UsageOut(serializers.Serializer):
    requests_this_minute = serializers.IntegerField(
        allow_null=True, help_text="null: not counted (no requests-per-minute limit)"
    )
    tokens_today = serializers.IntegerField()
    tokens_this_month = serializers.IntegerField()
    cost_this_month = serializers.DecimalField(max_digits=18, decimal_places=8)
    in_flight = serializers.IntegerField(
        allow_null=True, help_text="null: not counted (no concurrency limit)"
    )


class ForecastOut(serializers.Serializer):
    """A monthly budget projected to the month's end (docs/quotas.md#budget-forecasts)."""

    unit = serializers.ChoiceField(choices=["USD", "tokens"])
    basis = serializers.ChoiceField(
        choices=["recent", "weekday", "insufficient"],
        help_text="recent: one trimmed-mean daily rate; weekday: weekday and weekend rates; "
        "insufficient: fewer than 3 whole days of data, no projection yet",
    )
    spent = serializers.FloatField(help_text="this month so far, today included")
    budget = serializers.FloatField()
    projected = serializers.FloatField(allow_null=True, help_text="at the month's end")
    projected_share = serializers.FloatField(
        allow_null=True, help_text="projected / budget (1.0: exactly spent at the month's end)"
    )
    runs_out_on = serializers.DateField(
        allow_null=True,
        help_text="the team's local day spend reaches the budget, if within this month",
    )
    daily_rate = serializers.FloatField(allow_null=True, help_text="weekday's with weekday")
    weekend_rate = serializers.FloatField(allow_null=True)
    days_used = serializers.IntegerField(help_text="whole days the rate was read from")


class BudgetForecastsOut(serializers.Serializer):
    cost_per_month = ForecastOut(allow_null=True, help_text="null: no monthly spend budget")
    tokens_per_month = ForecastOut(allow_null=True, help_text="null: no monthly token budget")


class LimitOut(serializers.Serializer):
    scope = serializers.ChoiceField(choices=["key", "application", "member", "team"])
    name = serializers.CharField()
    limits = LimitValuesOut()
    usage = UsageOut()
    forecast = BudgetForecastsOut()


# --- deployments and routes ---------------------------------------------------------------


class DeploymentOut(serializers.Serializer):
    name = serializers.CharField()
    upstream = serializers.CharField(source="upstream.name")
    model = serializers.CharField()
    tier = serializers.CharField()
    max_concurrency = serializers.IntegerField()
    context_window = serializers.IntegerField()
    input_price_per_million = serializers.DecimalField(max_digits=12, decimal_places=6)
    output_price_per_million = serializers.DecimalField(max_digits=12, decimal_places=6)
    enabled = serializers.BooleanField()
    drained_until = serializers.DateTimeField(allow_null=True)
    drain_reason = serializers.CharField()
    config_error = serializers.CharField()


class CapacityShareOut(serializers.Serializer):
    attempts = serializers.IntegerField()
    capacity_errors = serializers.IntegerField()
    share = serializers.FloatField()


class DeploymentStateOut(serializers.Serializer):
    name = serializers.CharField()
    enabled = serializers.BooleanField()
    drained = serializers.BooleanField()
    drained_until = serializers.DateTimeField(allow_null=True)
    drain_reason = serializers.CharField()
    breaker = serializers.ChoiceField(choices=["closed", "open", "half-open"])
    open_until = serializers.DateTimeField(allow_null=True)
    configured_limit = serializers.IntegerField()
    effective_limit = serializers.FloatField()
    in_flight = serializers.IntegerField()
    batch_in_flight = serializers.IntegerField()
    waiting = serializers.DictField(
        child=serializers.IntegerField(), help_text="calls waiting by class"
    )
    oldest_wait_seconds = serializers.FloatField()
    capacity_error_share_5m = CapacityShareOut()
    capacity_error_share_1h = CapacityShareOut()
    alert = serializers.BooleanField()


class DrainIn(StrictSerializer):
    minutes = serializers.FloatField(min_value=0.01, max_value=7 * 24 * 60)
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class RouteOut(serializers.Serializer):
    name = serializers.CharField()
    chain = serializers.ListField(child=serializers.CharField())
    timeout_seconds = serializers.FloatField()
    max_attempts = serializers.IntegerField()
    backoff_base = serializers.FloatField()
    backoff_cap = serializers.FloatField()
    retry_after_cap = serializers.FloatField()


# --- config -------------------------------------------------------------------------------


class ConfigChangeOut(serializers.Serializer):
    section = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["created", "updated"])
    fields = serializers.DictField(
        child=serializers.ListField(), help_text="field -> [before, after]"
    )


class ConfigResultOut(serializers.Serializer):
    applied = serializers.BooleanField()
    summary = serializers.CharField()
    changes = ConfigChangeOut(many=True)


# --- usage and calls ----------------------------------------------------------------------


class UsageQuery(StrictSerializer):
    group_by = serializers.ChoiceField(
        choices=["team", "application", "member", "key", "route", "deployment"], default="team"
    )
    period = serializers.ChoiceField(choices=["day", "week", "month", "custom"], default="month")
    since = serializers.DateField(required=False, help_text="first day (custom period)")
    until = serializers.DateField(required=False, help_text="last day (custom period)")
    team = serializers.CharField(max_length=50, required=False)
    application = serializers.CharField(max_length=50, required=False)
    member = serializers.CharField(max_length=254, required=False)
    format = serializers.ChoiceField(choices=["json", "csv"], required=False)


class UsageRowOut(serializers.Serializer):
    key = serializers.CharField(allow_null=True)
    label = serializers.CharField()
    calls = serializers.IntegerField()
    success = serializers.IntegerField()
    errors = serializers.IntegerField()
    capacity_errors = serializers.IntegerField()
    rate_limit_errors = serializers.IntegerField()
    server_errors = serializers.IntegerField()
    timeouts = serializers.IntegerField()
    rejected = serializers.IntegerField()
    fallbacks = serializers.IntegerField()
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=20, decimal_places=8)
    p50_ms = serializers.FloatField(allow_null=True)
    p95_ms = serializers.FloatField(allow_null=True)


class UsageReportOut(serializers.Serializer):
    group_by = serializers.CharField()
    period = serializers.CharField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    rows = UsageRowOut(many=True)
    totals = UsageRowOut()


class CallQuery(StrictSerializer):
    """The call explorer's filters (reports/call_explorer.py), and paging."""

    since = serializers.DateTimeField(required=False, help_text="ISO 8601, inclusive")
    until = serializers.DateTimeField(required=False, help_text="ISO 8601, exclusive")
    team = serializers.CharField(max_length=50, required=False, help_text="team slug")
    application = serializers.CharField(max_length=50, required=False, help_text="slug")
    member = serializers.CharField(max_length=254, required=False, help_text="member email")
    key = serializers.CharField(max_length=40, required=False, help_text="key prefix (or start)")
    model = serializers.CharField(max_length=200, required=False, help_text="route asked for")
    deployment = serializers.CharField(max_length=50, required=False, help_text="served by")
    outcome = serializers.ChoiceField(choices=Outcome.choices, required=False)
    priority = serializers.ChoiceField(choices=PriorityClass.choices, required=False)
    stream = serializers.BooleanField(required=False)
    fell_back = serializers.BooleanField(required=False)
    min_latency_ms = serializers.FloatField(min_value=0, max_value=1e9, required=False)
    client_protocol = serializers.CharField(
        max_length=16, required=False, help_text="openai, anthropic, openai-responses"
    )
    upstream_protocol = serializers.CharField(max_length=16, required=False)
    user_agent = serializers.CharField(
        max_length=200, required=False, help_text="its start, e.g. codex_cli_rs or claude-cli"
    )
    cursor = serializers.CharField(max_length=500, required=False, help_text="from `next`")
    limit = serializers.IntegerField(min_value=1, max_value=1000, default=100)


class AttemptOut(serializers.Serializer):
    number = serializers.IntegerField()
    deployment = serializers.CharField()
    offset_ms = serializers.FloatField(help_text="from the call's arrival")
    duration_ms = serializers.FloatField()
    status_code = serializers.IntegerField(allow_null=True)
    error_class = serializers.CharField()
    wait_ms = serializers.FloatField(allow_null=True, help_text="the wait chosen before it")
    wait_reason = serializers.CharField()
    skipped = serializers.CharField(help_text="not sent: breaker, concurrency, budget, drain")


class CallOut(serializers.Serializer):
    request_id = serializers.CharField()
    created_at = serializers.DateTimeField()
    member_email = serializers.CharField()
    application_slug = serializers.CharField()
    key_prefix = serializers.CharField()
    priority = serializers.CharField()
    endpoint = serializers.CharField()
    requested_model = serializers.CharField()
    served_deployment = serializers.CharField()
    upstream_model = serializers.CharField()
    stream = serializers.BooleanField()
    outcome = serializers.CharField()
    status_code = serializers.IntegerField()
    error_message = serializers.CharField()
    attempt_count = serializers.IntegerField()
    retries = serializers.IntegerField()
    fell_back = serializers.BooleanField()
    queue_ms = serializers.FloatField(allow_null=True)
    tokens_in = serializers.IntegerField()
    tokens_out = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=16, decimal_places=8)
    latency_ms = serializers.FloatField()
    ttfb_ms = serializers.FloatField(allow_null=True)
    client_protocol = serializers.CharField(help_text="the protocol the client spoke")
    upstream_protocol = serializers.CharField(help_text="the kind of the upstream that served")
    degraded = serializers.ListField(
        child=serializers.CharField(),
        source="degraded_fields",
        help_text="what crossing protocol kinds changed or left out, one entry a field",
    )
    user_agent = serializers.CharField()


class AgentRowOut(serializers.Serializer):
    agent = serializers.CharField(help_text="the user agent's product, e.g. claude-cli")
    route = serializers.CharField()
    client_protocol = serializers.CharField()
    upstream_protocol = serializers.CharField()
    calls = serializers.IntegerField()
    failed = serializers.IntegerField()
    degraded = serializers.IntegerField(help_text="calls translated with something left out")


class CallDetailOut(CallOut):
    attempts = AttemptOut(many=True)


class CallPageOut(serializers.Serializer):
    next = serializers.CharField(allow_null=True, help_text="the next (older) page")
    results = CallOut(many=True)


# --- management tokens --------------------------------------------------------------------


class TokenOut(serializers.Serializer):
    prefix = serializers.CharField()
    name = serializers.CharField()
    user = serializers.EmailField(source="user.email", allow_null=True, default=None)
    team = serializers.CharField(source="team.slug", allow_null=True, default=None)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    revoked_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(allow_null=True)


class IssuedTokenOut(TokenOut):
    token = serializers.CharField(help_text="The full token. Shown only in this response.")


class TokenCreate(StrictSerializer):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    team = serializers.RegexField(required=False, help_text="narrow the token to a team", **SLUG)
    expires_days = serializers.IntegerField(
        min_value=1, max_value=3650, required=False, allow_null=True
    )
