"""Batch windows set in the config file (routing/catalog/config_file.py) and the admin's model
validation."""

import pytest
from django.core.exceptions import ValidationError

from accounts.models import Application, Team
from routing.catalog.config_file import ConfigError, apply_config, validate_config

pytestmark = pytest.mark.django_db


def _config(team_windows: object = "", app_windows: object = "") -> dict:
    return {
        "teams": [{"slug": "night", "time_zone": "Europe/Paris", "batch_windows": team_windows}],
        "applications": [{"slug": "reports", "team": "night", "batch_windows": app_windows}],
    }


def test_windows_from_the_file_are_stored_normalized_and_reapplied_unchanged() -> None:
    report = apply_config(validate_config(_config(["0:00-6:00", "22:00-23:00"], "any")))
    assert report.changed
    assert Team.objects.get(slug="night").batch_windows == "00:00-06:00, 22:00-23:00"
    assert Application.objects.get(slug="reports").batch_windows == "any"
    again = apply_config(validate_config(_config(["0:00-6:00", "22:00-23:00"], "any")))
    assert not again.changed


@pytest.mark.parametrize(
    ("team", "app", "message"),
    [
        ("00:00-06", "", r"teams\[0\] \(night\): batch window '00:00-06'"),
        ("", ["01:00-02:00", "noon"], r"applications\[0\] \(reports\): batch window 'noon'"),
        ("", [1], r"applications\[0\] \(reports\): 'batch_windows' must hold strings"),
    ],
)
def test_a_bad_window_rejects_the_file_naming_the_entry(team, app, message) -> None:
    with pytest.raises(ConfigError, match=message):
        validate_config(_config(team, app))


def test_the_admin_refuses_a_bad_window() -> None:
    team = Team(slug="x", name="x", batch_windows="25:00-26:00")
    with pytest.raises(ValidationError, match="batch_windows"):
        team.full_clean()
