"""Who calls: teams, their members, the applications they build, and the keys they hold."""

from django.conf import settings
from django.db import models


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
