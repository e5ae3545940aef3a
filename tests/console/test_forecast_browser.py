"""The month-end forecast in headless Chromium against the live gateway: a member with a
monthly budget and three weeks of spend sees its forecast on the Limits page and the
Overview; the other team's admin sees neither."""

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from tests.console.browser import Console
from tests.console.people import PASSWORD, People
from tests.support import GatewayHandle

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def spender(console_people: People, django_db_blocker: Any) -> Iterator[str]:
    """A member of the home team who spent $3 a day from 21 to 2 days ago (nothing in the
    last 24 hours, which other tests count), with a $40 monthly budget; removed afterwards."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from accounts.models import Member
    from accounts.services import key_issue
    from quotas.models import Limit, UsageRollup

    email = "fran-forecast-b@example.com"
    with django_db_blocker.unblock():
        user = get_user_model().objects.create_user(email, email=email, password=PASSWORD)
        member = Member.objects.create(user=user, team=console_people.home)
        key, _ = key_issue(
            member_email=email, application_slug=console_people.home_app.slug, name="forecast"
        )
        noon = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
        for days_ago in range(2, 22):
            UsageRollup.objects.create(
                hour=noon - timedelta(days=days_ago),
                key_prefix=key.prefix,
                deployment="small",
                member_id=member.pk,
                application_id=key.application_id,
                team_id=console_people.home.pk,
                requests=1,
                cost=Decimal("3"),
            )
        limit = Limit.objects.create(scope="member", member=member, cost_per_month=40)
    yield email
    with django_db_blocker.unblock():
        UsageRollup.objects.filter(key_prefix=key.prefix).delete()
        limit.delete()
        user.delete()


def _row(console: Console, name: str) -> Any:
    from selenium.webdriver.common.by import By

    selector = f"[data-testid='limit-row'][data-name='{name}']"
    return console.wait(lambda d: d.find_element(By.CSS_SELECTOR, selector), name)


def test_the_member_and_their_team_admin_see_the_forecast_the_other_team_does_not(
    chromium: Any, gateway: GatewayHandle, console_people: People, spender: str
) -> None:
    from selenium.webdriver.common.by import By

    emails = {role: user.email for role, user in console_people.users.items()}
    console = Console(chromium, gateway.url, emails | {"spender": spender}, PASSWORD)
    try:
        for role in ("spender", "team_admin"):
            console.login(role)
            console.open("/limits/")
            cell = _row(console, spender).find_element(By.CSS_SELECTOR, "[data-testid='forecast']")
            text = cell.text
            assert "of $40.00" in text and "$3.00/day" in text, text
            assert "runs out" in text or "ran out" in text, text  # $90 a month against $40
            console.open("/")
            section = console.wait(
                lambda d: d.find_element(By.CSS_SELECTOR, "[data-testid='budget-forecasts']"),
                "budgets",
            )
            assert spender in section.text and "of $40.00" in section.text
        console.login("other_team_admin")
        console.open("/limits/")
        console.wait(lambda d: d.find_elements(By.TAG_NAME, "h1"), "the page")
        assert spender not in console.text()
    finally:
        console.logout()
