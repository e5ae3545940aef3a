"""Console forms: input checks and clear messages; the rules themselves live in the
services (which raise a domain error the view shows on the form)."""

from datetime import timedelta
from typing import Any
from zoneinfo import available_timezones

from django import forms
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import QuerySet

from accounts.models import (
    Application,
    Fallback,
    Member,
    PriorityClass,
    Team,
)
from accounts.services import MAX_KEY_DAYS
from accounts.validators import APPLICATION_RANGES, NAME_MAX_LENGTH, SLUG_MAX_LENGTH
from accounts.windows import normalize_windows
from quotas.validators import COST_DECIMALS, LIMIT_MAX, MAX_COST
from routing.models import Route


def _bounds(name: str) -> dict[str, int]:
    """An application setting's bounds, as the services check them."""
    low, high = APPLICATION_RANGES[name]
    return {"min_value": low, "max_value": high}


class LoginForm(AuthenticationForm):
    """Django's own login form; the username is the member's email."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["username"].label = "Email"
        self.fields["username"].widget.attrs.update({"autocomplete": "username", "autofocus": True})


class KeyCreateForm(forms.Form):
    application = forms.ModelChoiceField(queryset=Application.objects.none())
    member = forms.ModelChoiceField(
        queryset=Member.objects.none(),
        required=False,
        help_text="Whose key it is (yours when left empty).",
    )
    name = forms.CharField(max_length=200, required=False, help_text="A label, e.g. 'laptop'.")
    expires_days = forms.IntegerField(
        min_value=1,
        max_value=MAX_KEY_DAYS,
        required=False,
        label="Expires after (days)",
        help_text="Empty: never expires.",
    )

    def __init__(
        self,
        *args: Any,
        applications: QuerySet[Application],
        members: QuerySet[Member] | None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["application"].queryset = applications.order_by("slug")
        if applications.count() == 1:
            self.fields["application"].initial = applications.first()
        if members is None:
            del self.fields["member"]
        else:
            self.fields["member"].queryset = members.order_by("user__email")


GRACE_CHOICES = [
    ("0", "None: the old key stops now"),
    ("3600", "1 hour"),
    ("86400", "1 day"),
    ("604800", "7 days"),
    ("2592000", "30 days"),
]


class KeyRotateForm(forms.Form):
    grace = forms.TypedChoiceField(
        choices=GRACE_CHOICES,
        coerce=lambda v: timedelta(seconds=int(v)),
        initial="86400",
        label="Keep the old key working for",
    )


class MemberCreateForm(forms.Form):
    email = forms.EmailField(max_length=254)
    team = forms.ModelChoiceField(queryset=Team.objects.none())
    role = forms.ChoiceField(choices=Member.Role.choices, initial=Member.Role.MEMBER)
    password = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        min_length=8,
        help_text="Optional: lets them log in to the console at once (8 characters or more).",
    )

    def __init__(self, *args: Any, teams: QuerySet[Team], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams.order_by("slug")
        if teams.count() == 1:
            self.fields["team"].initial = teams.first()


class MemberEditForm(forms.Form):
    role = forms.ChoiceField(choices=Member.Role.choices)


_ZONES = sorted(available_timezones())


class TeamForm(forms.Form):
    slug = forms.SlugField(max_length=SLUG_MAX_LENGTH, help_text="Letters, digits, '-' or '_'.")
    name = forms.CharField(max_length=NAME_MAX_LENGTH)
    time_zone = forms.ChoiceField(
        choices=[(z, z) for z in _ZONES],
        initial="UTC",
        help_text="Days and months of limits and reports start at midnight here.",
    )

    def __init__(self, *args: Any, editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if editing:
            del self.fields["slug"]


class ApplicationForm(forms.Form):
    slug = forms.SlugField(max_length=SLUG_MAX_LENGTH, help_text="Letters, digits, '-' or '_'.")
    name = forms.CharField(max_length=NAME_MAX_LENGTH)
    team = forms.ModelChoiceField(queryset=Team.objects.none())
    routes = forms.ModelMultipleChoiceField(
        queryset=Route.objects.order_by("name"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="The models (routes) its keys may call.",
    )
    default_priority = forms.ChoiceField(choices=PriorityClass.choices)
    fallback = forms.ChoiceField(choices=Fallback.choices)
    default_max_tokens = forms.IntegerField(
        **_bounds("default_max_tokens"), initial=1024, label="Default max_tokens"
    )
    max_tokens_ceiling = forms.IntegerField(
        **_bounds("max_tokens_ceiling"), required=False, label="max_tokens ceiling"
    )
    clamp_max_tokens = forms.BooleanField(
        required=False, initial=True, label="Clamp max_tokens to the ceiling (else refuse)"
    )
    max_n = forms.IntegerField(**_bounds("max_n"), required=False, label="Max n")
    batch_windows = forms.CharField(
        max_length=200,
        required=False,
        label="Batch windows",
        help_text="When its batches (Batch API) may run, in its team's time zone: "
        '"00:00-06:00" (several comma separated, across midnight allowed), "any", or blank '
        "to follow the team.",
    )

    def clean_batch_windows(self) -> str:
        try:
            return normalize_windows(self.cleaned_data.get("batch_windows", ""))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from exc

    cache_ttl_seconds = forms.IntegerField(
        **_bounds("cache_ttl_seconds"),
        required=False,
        initial=0,
        label="Response cache (seconds)",
        help_text="Answer identical deterministic requests (temperature 0 or a seed, no tools) "
        "from the cache for this long; 0 or blank: off.",
    )

    def clean_cache_ttl_seconds(self) -> int:
        return self.cleaned_data.get("cache_ttl_seconds") or 0

    def __init__(
        self, *args: Any, teams: QuerySet[Team], editing: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams.order_by("slug")
        if teams.count() == 1:
            self.fields["team"].initial = teams.first()
        if editing:
            del self.fields["slug"]
            del self.fields["team"]


class LimitForm(forms.Form):
    """Empty: no limit. The same fields and meaning as `manage.py set_limit`."""

    requests_per_minute = forms.IntegerField(
        min_value=0, max_value=LIMIT_MAX["requests_per_minute"], required=False
    )
    tokens_per_minute = forms.IntegerField(
        min_value=0, max_value=LIMIT_MAX["tokens_per_minute"], required=False
    )
    max_concurrency = forms.IntegerField(
        min_value=0, max_value=LIMIT_MAX["max_concurrency"], required=False, label="Calls in flight"
    )
    tokens_per_day = forms.IntegerField(
        min_value=0, max_value=LIMIT_MAX["tokens_per_day"], required=False
    )
    tokens_per_month = forms.IntegerField(
        min_value=0, max_value=LIMIT_MAX["tokens_per_month"], required=False
    )
    cost_per_month = forms.DecimalField(
        min_value=0,
        max_value=MAX_COST,
        decimal_places=COST_DECIMALS,
        max_digits=14,
        required=False,
        label="Spend per month (USD)",
    )


class LimitTargetForm(forms.Form):
    scope = forms.ChoiceField(
        choices=[
            ("team", "Team"),
            ("application", "Application"),
            ("member", "Member"),
            ("key", "API key"),
        ]
    )
    name = forms.CharField(
        max_length=254,
        help_text="Team or application slug, member email, or key prefix.",
        widget=forms.TextInput(attrs={"placeholder": "slug, email or key prefix"}),
    )


class DrainForm(forms.Form):
    minutes = forms.IntegerField(
        min_value=1, max_value=7 * 24 * 60, initial=10, help_text="1 minute to 1 week."
    )
    reason = forms.CharField(max_length=300, required=False)


class ConfigUploadForm(forms.Form):
    file = forms.FileField(required=False, help_text="A TOML file like the one you download.")
    text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 12}), required=False, label="…or paste it here"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        upload = data.get("file")
        if upload is not None:
            if upload.size > 2_000_000:
                raise forms.ValidationError("The file is larger than 2 MB.")
            try:
                data["text"] = upload.read().decode("utf-8")
            except UnicodeDecodeError:
                raise forms.ValidationError("The file is not UTF-8 text.") from None
        if not data.get("text", "").strip():
            raise forms.ValidationError("Choose a TOML file or paste its text.")
        return data
