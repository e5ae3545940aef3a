"""Where calls go (upstreams, deployments, routes) and what happened to them (the audit)."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from core.outcomes import Outcome


class Upstream(models.Model):
    """An LLM API of one kind (OpenAI-compatible chat completions, Anthropic's Messages, or
    OpenAI's Responses). Its key is read from the environment, never stored."""

    class Kind(models.TextChoices):
        OPENAI = "openai", "OpenAI-compatible"
        ANTHROPIC = "anthropic", "Anthropic Messages"
        OPENAI_RESPONSES = "openai-responses", "OpenAI Responses"

    name = models.SlugField(unique=True)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.OPENAI)
    base_url = models.URLField(max_length=500)
    api_key_env = models.CharField(
        max_length=100, blank=True, help_text="Name of the environment variable holding the key."
    )
    connect_timeout = models.FloatField(default=5.0)
    read_timeout = models.FloatField(default=60.0)
    forward_openai_headers = models.BooleanField(
        default=False,
        help_text="Pass the client's OpenAI-Organization, OpenAI-Project and OpenAI-Beta "
        "headers on to this upstream (an OpenAI account that uses them).",
    )
    http2 = models.BooleanField(
        default=False,
        help_text="Call this upstream over HTTP/2: many calls on one connection (https: if "
        "the upstream chooses it, else HTTP/1.1; http: it must speak HTTP/2 without TLS).",
    )

    def __str__(self) -> str:
        return self.name


class Deployment(models.Model):
    """One model at one upstream: what a route's chain is made of."""

    name = models.SlugField(unique=True)
    upstream = models.ForeignKey(Upstream, on_delete=models.PROTECT, related_name="deployments")
    model = models.CharField(max_length=200, help_text="The model name the upstream expects.")
    tier = models.CharField(max_length=50, default="standard")
    max_concurrency = models.PositiveIntegerField(default=8)
    context_window = models.PositiveIntegerField(default=128_000)
    input_price_per_million = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    output_price_per_million = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    enabled = models.BooleanField(default=True)
    breaker_threshold = models.PositiveSmallIntegerField(
        default=3,
        help_text="Consecutive capacity/rate-limit/server errors that open it (0: never).",
    )
    breaker_cooldown = models.FloatField(default=300.0, help_text="Seconds it stays open.")
    retry_budget = models.FloatField(
        default=0.1, help_text="Retries allowed as a share of first attempts (last minute)."
    )
    interactive_reserve = models.FloatField(
        default=0.2,
        validators=[MinValueValidator(0.0), MaxValueValidator(0.99)],
        help_text="Share of the slots batch calls may not take: kept for interactive ones.",
    )
    drained_until = models.DateTimeField(
        null=True, blank=True, help_text="Taken out of service (drill) until then."
    )
    drain_reason = models.CharField(max_length=300, blank=True)
    config_error = models.CharField(max_length=300, blank=True)
    config_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name


class Route(models.Model):
    """The public model name clients send, the chain of deployments that serve it, and how
    hard to try (defaults: docs/routing.md)."""

    name = models.CharField(max_length=200, unique=True)
    timeout_seconds = models.FloatField(
        default=60.0, help_text="Deadline of a call: no retry, wait or fallback outlives it."
    )
    max_attempts = models.PositiveSmallIntegerField(
        default=5, help_text="Upstream attempts per call, across the whole chain."
    )
    backoff_base = models.FloatField(default=1.0)
    backoff_cap = models.FloatField(default=30.0)
    retry_after_cap = models.FloatField(
        default=30.0, help_text="An upstream Retry-After longer than this moves on instead."
    )

    class Translation(models.TextChoices):
        DEGRADE = "degrade", "Degrade by the documented rules"
        STRICT = "strict", "Refuse what has no equivalent"

    translation = models.CharField(
        max_length=8,
        choices=Translation.choices,
        default=Translation.DEGRADE,
        help_text="A call crossing protocol kinds: degrade what has no equivalent on the "
        "other side (recorded on the call), or refuse it naming the field.",
    )
    deployments = models.ManyToManyField(
        Deployment, through="RouteDeployment", related_name="routes"
    )
    # Which applications may call this route (`application.routes` from the other side). The
    # table keeps the name it had when accounts owned the grant, so no row moved.
    applications = models.ManyToManyField(
        "accounts.Application",
        blank=True,
        related_name="routes",
        db_table="accounts_application_routes",
    )

    def __str__(self) -> str:
        return self.name


class RouteDeployment(models.Model):
    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="chain")
    deployment = models.ForeignKey(Deployment, on_delete=models.PROTECT)
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["route", "position"], name="route_position_unique"),
            models.UniqueConstraint(fields=["route", "deployment"], name="route_deployment_unique"),
        ]


class CallRecord(models.Model):
    """One row per call that reached Sluice. Names are copied, not only linked, so the
    trail still reads right after a key, member or deployment is renamed or deleted.
    No prompt or completion text is stored."""

    request_id = models.CharField(max_length=40, primary_key=True)
    created_at = models.DateTimeField(db_index=True)
    # The member's, application's and key's lookups use the indexes with time below: every
    # index is written on every call.
    member = models.ForeignKey(
        "accounts.Member",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        db_index=False,
    )
    member_email = models.CharField(max_length=254, blank=True)
    application = models.ForeignKey(
        "accounts.Application",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        db_index=False,
    )
    application_slug = models.CharField(max_length=50, blank=True)
    key_prefix = models.CharField(max_length=40, blank=True)
    priority = models.CharField(max_length=16, blank=True)
    queue_ms = models.FloatField(
        null=True, blank=True, help_text="Time spent waiting for a deployment's slot."
    )
    queue_position = models.PositiveIntegerField(
        null=True, blank=True, help_text="Calls of its class already waiting when it queued."
    )
    endpoint = models.CharField(max_length=32)
    requested_model = models.CharField(max_length=200, blank=True)
    served_deployment = models.CharField(max_length=50, blank=True)
    upstream_model = models.CharField(max_length=200, blank=True)
    stream = models.BooleanField(default=False)
    outcome = models.CharField(max_length=32, choices=Outcome.choices)
    status_code = models.PositiveSmallIntegerField()
    error_message = models.CharField(max_length=500, blank=True)
    attempt_count = models.PositiveSmallIntegerField(default=0)
    retries = models.PositiveSmallIntegerField(
        default=0, help_text="Attempts at a deployment this call had already tried."
    )
    fell_back = models.BooleanField(
        default=False, help_text="Served by a deployment other than the first of the chain."
    )
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    cost = models.DecimalField(max_digits=16, decimal_places=8, default=0)
    latency_ms = models.FloatField(default=0)
    ttfb_ms = models.FloatField(null=True, blank=True)
    client_ip = models.GenericIPAddressField(null=True, blank=True)
    batch_id = models.CharField(
        max_length=40, blank=True, db_index=True, help_text="The batch this call was a line of."
    )
    custom_id = models.CharField(max_length=200, blank=True, help_text="The batch line's id.")
    cache = models.CharField(
        max_length=8,
        blank=True,
        help_text="The response cache: hit (answered from it, no upstream attempt), miss or "
        "bypass; blank when the application has no cache.",
    )
    client_protocol = models.CharField(
        max_length=16, default="openai", help_text="The protocol the client spoke."
    )
    degraded = models.TextField(
        blank=True,
        help_text="What crossing protocol kinds changed or left out, one field a line.",
    )
    user_agent = models.CharField(max_length=200, blank=True, db_index=True)

    @property
    def degraded_fields(self) -> list[str]:
        return self.degraded.splitlines()

    upstream_protocol = models.CharField(
        max_length=16, blank=True, help_text="The kind of the upstream that served it."
    )

    class Meta:
        indexes = [
            models.Index(fields=["member", "created_at"], name="call_member_time"),
            # The call explorer's filters, each with time for its newest-first keyset paging.
            models.Index(fields=["application", "created_at"], name="call_app_time"),
            models.Index(fields=["served_deployment", "created_at"], name="call_served_time"),
            models.Index(fields=["requested_model", "created_at"], name="call_route_time"),
            models.Index(fields=["outcome", "created_at"], name="call_outcome_time"),
            models.Index(fields=["key_prefix", "created_at"], name="call_key_time"),
        ]

    def __str__(self) -> str:
        return self.request_id


class Attempt(models.Model):
    """One row per try at one deployment within a call."""

    # No index of its own: the unique (call, number) index serves every lookup by call.
    call = models.ForeignKey(
        CallRecord, on_delete=models.CASCADE, related_name="attempts", db_index=False
    )
    number = models.PositiveSmallIntegerField()
    deployment = models.CharField(max_length=50)
    started_at = models.DateTimeField()
    duration_ms = models.FloatField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error_class = models.CharField(max_length=32, blank=True)
    retry_delay_ms = models.FloatField(
        null=True, blank=True, help_text="The wait chosen before this attempt."
    )
    retry_reason = models.CharField(max_length=16, blank=True)  # backoff | retry_after | wait
    skipped = models.CharField(
        max_length=16, blank=True, help_text="Not sent: breaker, concurrency, budget or drain."
    )

    class Meta:
        ordering = ["call", "number"]
        # The console's capacity-error share per deployment reads recent attempts by time.
        indexes = [models.Index(fields=["started_at"], name="attempt_started")]
        constraints = [
            models.UniqueConstraint(fields=["call", "number"], name="attempt_number_unique")
        ]
