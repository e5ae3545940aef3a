"""A real onboarding scripted through the management API with httpx against the gateway
under uvicorn: team, application, member, key; the key works with the openai SDK; a limit
set through the API answers 429; a revocation answers 401 within seconds; the usage report
and the call list find the calls."""

import time
import uuid
from typing import Any

import httpx
import openai
import pytest

from tests.support import GatewayHandle, wait_until

MESSAGES = [{"role": "user", "content": "Say hi."}]


@pytest.fixture
def admin_token(committed_db: None) -> str:
    from accounts.services import SYSTEM, management_token_issue

    _, plaintext = management_token_issue(actor=SYSTEM, name="onboarding-test")
    return plaintext


def test_onboarding_through_the_management_api(gateway: GatewayHandle, admin_token: str) -> None:
    api = httpx.Client(
        base_url=f"{gateway.url}/api/v1",
        headers={"Authorization": f"Bearer {admin_token}"},
        timeout=30,
    )
    slug = f"team-{uuid.uuid4().hex[:8]}"
    email = f"{slug}@example.com"

    def ok(response: httpx.Response, status: int = 200) -> Any:
        assert response.status_code == status, (response.status_code, response.text)
        return response.json() if response.content else None

    ok(api.post("/teams/", json={"slug": slug, "name": "Onboarded"}), 201)
    ok(
        api.post("/applications/", json={"team": slug, "slug": f"{slug}-app", "routes": ["fast"]}),
        201,
    )
    member = ok(api.post("/members/", json={"email": email, "team": slug}), 201)
    assert member["role"] == "member" and member["active"] is True
    issued = ok(api.post("/keys/", json={"application": f"{slug}-app", "member": email}), 201)
    key, prefix = issued["key"], issued["prefix"]
    assert key.startswith(prefix + "-")

    # The key works with the official SDK.
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    answer = client.chat.completions.create(model="fast", messages=MESSAGES)
    assert answer.choices[0].message.content

    # A limit set through the API: one request a minute. Workers see it within seconds.
    limit = ok(api.put(f"/limits/key/{prefix}/", json={"requests_per_minute": 1}))
    assert limit["limits"]["requests_per_minute"] == 1

    def refused() -> bool:
        try:
            client.chat.completions.create(model="fast", messages=MESSAGES)
        except openai.RateLimitError as exc:
            return exc.status_code == 429
        return False

    wait_until(refused, timeout=10, every=0.3)
    ok(api.delete(f"/limits/key/{prefix}/"), 204)

    # Revoked through the API: refused with 401 within seconds.
    ok(api.post(f"/keys/{prefix}/revoke/"))
    revoked_at = time.monotonic()

    def unauthorized() -> bool:
        try:
            client.chat.completions.create(model="fast", messages=MESSAGES)
        except openai.AuthenticationError:
            return True
        except openai.RateLimitError:
            return False
        return False

    wait_until(unauthorized, timeout=10, every=0.2)
    assert time.monotonic() - revoked_at < 5

    # The usage report and the call list find the calls.
    def usage_row() -> dict[str, Any] | None:
        report = ok(api.get("/usage/", params={"group_by": "key", "period": "day", "team": slug}))
        return next((r for r in report["rows"] if r["key"] == prefix and r["calls"] >= 1), None)

    row = wait_until(usage_row, timeout=10, every=0.2)
    assert row["tokens_out"] > 0
    csv_report = api.get(
        "/usage/",
        params={"group_by": "key", "period": "day", "team": slug},
        headers={"Accept": "text/csv"},
    )
    assert csv_report.status_code == 200 and prefix in csv_report.text

    calls = wait_until(
        lambda: ok(api.get("/calls/", params={"key": prefix}))["results"], timeout=10
    )
    outcomes = {c["outcome"] for c in calls}
    assert "success" in outcomes
    one = ok(api.get(f"/calls/{calls[-1]['request_id']}/"))
    assert one["key_prefix"] == prefix

    # Every change above is in the admin actions log, made through the API.
    log = ok(api.get("/admin-actions/", params={"limit": 50}))["results"]
    actions = {(a["action"], a["via"]) for a in log}
    for action in (
        "team.create",
        "application.create",
        "member.create",
        "key.create",
        "key.revoke",
    ):
        assert (action, "api") in actions, action
