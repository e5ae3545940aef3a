"""The models and their migrations agree: moving modules between packages (routing's
request path, catalog and observability; the reports app) leaves nothing to migrate."""

from io import StringIO

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_makemigrations_finds_nothing_to_migrate() -> None:
    out = StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit:  # --check exits 1 when a migration would be written
        pytest.fail(f"makemigrations --check found changes:\n{out.getvalue()}")
