"""Who calls: teams, their members, the applications they build, and the keys they hold."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator
from django.db import models

from accounts.windows import parse_windows

MAX_CACHE_TTL_SECONDS = (
    7 * 24 * 3600
)  # an application's response cache keeps answers a week at most


def validate_windows(value: str) -> None:
    try:
        parse_windows(value)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class PriorityClass(models.TextChoices):
    INTERACTIVE = "interactive", "Interactive"
    BATCH = "batch", "Batch"


class Fallback(models.TextChoices):
    ANY = "any", "Any deployment in the chain"
    SAME_TIER = "same-tier", "Only deployments of the first one's tier"
    NONE = "none", "Never leave the first deployment"


class Team(models.Model):
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    time_zone = models.CharField(max_length=64, default="UTC")
    batch_windows = models.CharField(
        max_length=200,
        blank=True,
        validators=[validate_windows],
        help_text='When batches may run, in the team\'s time zone: "00:00-06:00, 22:00-23:00" '
        '(blank or "any": at any time).',
    )

    def __str__(self) -> str:
        return self.slug


class Member(models.Model):
    class Role(models.TextChoices):
        ADMIN = "admin", "Admin"
        MEMBER = "member", "Member"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="member"
    )
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="members")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    def __str__(self) -> str:
        return self.user.email


class Application(models.Model):
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="applications")
    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    default_priority = models.CharField(
        max_length=16, choices=PriorityClass.choices, default=PriorityClass.INTERACTIVE
    )
    fallback = models.CharField(
        max_length=16,
        choices=Fallback.choices,
        default=Fallback.ANY,
        help_text="Default fallback policy; X-Sluice-Fallback overrides it per request.",
    )
    default_max_tokens = models.PositiveIntegerField(
        default=1024, help_text="Output tokens reserved for a request that sets no max_tokens."
    )
    max_tokens_ceiling = models.PositiveIntegerField(null=True, blank=True)
    clamp_max_tokens = models.BooleanField(
        default=True, help_text="Over the ceiling: clamp max_tokens (else refuse with 400)."
    )
    max_n = models.PositiveIntegerField(null=True, blank=True, help_text="Ceiling on `n`.")
    batch_windows = models.CharField(
        max_length=200,
        blank=True,
        validators=[validate_windows],
        help_text='When its batches may run, in the team\'s time zone: "00:00-06:00" (several '
        'comma separated), "any", or blank to follow the team.',
    )
    cache_ttl_seconds = models.PositiveIntegerField(
        default=0,
        validators=[MaxValueValidator(MAX_CACHE_TTL_SECONDS)],
        help_text="Answer identical deterministic requests from the response cache for this "
        "many seconds (0: off).",
    )

    def __str__(self) -> str:
        return self.slug


class ApiKey(models.Model):
    """Only the SHA-256 of the key is kept; `prefix` is the public part that names it."""

    member = models.ForeignKey(Member, on_delete=models.CASCADE, related_name="api_keys")
    application = models.ForeignKey(Application, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=40, unique=True)
    secret_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "API key"

    def __str__(self) -> str:
        return self.prefix


class AdminAction(models.Model):
    """One change made through the console, the management API or a command. Append-only:
    services add rows, nothing updates or deletes them (the admin shows them read-only).
    Secrets never land here: a key is named by its prefix."""

    class Via(models.TextChoices):
        CONSOLE = "console", "Console"
        API = "api", "Management API"
        COMMAND = "command", "Command"
        SSO = "sso", "Single sign-on"

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
    )
    actor_label = models.CharField(max_length=254, blank=True)
    via = models.CharField(max_length=16, choices=Via.choices)
    action = models.CharField(max_length=64)  # e.g. "key.create", "deployment.drain"
    object_type = models.CharField(max_length=64)
    object_repr = models.CharField(max_length=300)
    team_id = models.BigIntegerField(null=True, blank=True)  # whose team admin may read it
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["team_id", "at"], name="adminaction_team_at")]
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.actor_label} {self.action} {self.object_repr}"


class ManagementToken(models.Model):
    """A token for the management API (/api/v1/), stored like an API key: only the SHA-256,
    named by its public prefix (`sk-sluice-admin-…`). It acts with the roles of the user it
    belongs to, narrowed to `team` when set; a token without a user is an admin token
    (global, or of its team) made by `manage.py issue_admin_token`."""

    name = models.CharField(max_length=200, blank=True)
    prefix = models.CharField(max_length=40, unique=True)
    secret_hash = models.CharField(max_length=64)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="management_tokens",
    )
    team = models.ForeignKey(
        Team, null=True, blank=True, on_delete=models.CASCADE, related_name="management_tokens"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.prefix


class SsoConfig(models.Model):
    """The one OpenID Connect provider the console signs in with (row pk=1, written by the
    config file's `[sso]` table, accounts/sso_config.py). The client secret is named by
    environment variable, never stored."""

    class PasswordLogin(models.TextChoices):
        ON = "on", "Everyone with a password"
        BREAK_GLASS = "break-glass", "Only the break-glass accounts"

    enabled = models.BooleanField(default=True)
    display_name = models.CharField(max_length=100, default="single sign-on")
    issuer = models.URLField(max_length=500)
    client_id = models.CharField(max_length=255)
    client_secret_env = models.CharField(max_length=128)
    scopes = models.CharField(max_length=255, default="openid email profile")
    groups_claim = models.CharField(max_length=100, default="groups")
    redirect_uri = models.URLField(max_length=500, blank=True)
    password_login = models.CharField(
        max_length=16, choices=PasswordLogin.choices, default=PasswordLogin.ON
    )
    break_glass = models.JSONField(default=list)  # usernames that keep password login
    group_rules = models.JSONField(default=list)  # [{group, team, role, staff}], in order
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "SSO configuration"

    def __str__(self) -> str:
        return self.issuer


class SsoIdentity(models.Model):
    """Which provider account a user signs in as: (issuer, subject) is stable where an
    email is not. `last_login_at` is what `manage.py sso_sweep` reads."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(max_length=500)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list)  # as the provider sent them at the last login
    # Deactivated by single sign-on (groups gone, or the sweep), so a sign-in with mapped
    # groups again reactivates them; a member an admin deactivated stays out.
    deactivated_by_sso = models.BooleanField(default=False)
    first_login_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField()

    class Meta:
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_subject")
        ]

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"
