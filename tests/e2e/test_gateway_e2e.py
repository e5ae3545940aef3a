"""The gateway as a user runs it: uvicorn, the official openai SDK, the simulator upstream."""

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support import ROOT, GatewayHandle, SimulatorHandle, start_gateway, wait_until

REDIS = bool(os.environ.get("REDIS_URL"))

MESSAGES = [{"role": "user", "content": "Say hello to the team."}]


@pytest.fixture
def sdk(gateway: GatewayHandle, issue_key) -> openai.OpenAI:
    # No SDK retries: each call here must be exactly one call to Sluice.
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=issue_key().plaintext, max_retries=0)


@pytest.fixture
def big_full(simulator: SimulatorHandle) -> Iterator[None]:
    simulator.set_capacity("big", 0)
    yield
    simulator.set_capacity("big", 4)


def test_chat_completion_through_the_sdk_is_served_and_audited(sdk, call_record, issue_key):
    raw = sdk.chat.completions.with_raw_response.create(model="smart", messages=MESSAGES)
    completion = raw.parse()

    assert completion.choices[0].message.content.startswith("tok")
    assert raw.headers["x-sluice-served-model"] == "big"
    assert raw.headers["x-sluice-attempts"] == "1"
    record = call_record(raw.headers["x-sluice-request-id"])
    assert record.outcome == "success"
    assert record.status_code == 200
    assert (record.requested_model, record.served_deployment, record.upstream_model) == (
        "smart",
        "big",
        "big",
    )
    assert record.tokens_in == completion.usage.prompt_tokens > 0
    assert record.tokens_out == completion.usage.completion_tokens == 16
    # big costs $5 / $15 per million tokens in the demo config.
    expected = (record.tokens_in * 5 + record.tokens_out * 15) / 1_000_000
    assert float(record.cost) == pytest.approx(expected)
    assert record.key_prefix == sdk.api_key[: len(record.key_prefix)]
    assert record.member_email.endswith("@example.com")
    assert record.application_slug == "demo"
    assert record.priority == "interactive"
    assert record.stream is False
    assert record.client_ip == "127.0.0.1"
    assert record.latency_ms > 0 and record.ttfb_ms is not None
    attempts = list(
        record.attempts.values_list("number", "deployment", "status_code", "error_class")
    )
    assert attempts == [(1, "big", 200, "")]


def test_streaming_passes_chunks_through_without_an_unasked_usage_chunk(sdk, call_record):
    with sdk.chat.completions.with_streaming_response.create(
        model="smart", messages=MESSAGES, stream=True
    ) as response:
        request_id = response.headers["x-sluice-request-id"]
        assert response.headers["x-sluice-served-model"] == "big"
        chunks = list(response.parse())

    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == "tok " * 16
    assert all(c.choices for c in chunks), "usage-only chunk leaked to a client that did not ask"
    record = call_record(request_id)
    assert record.stream is True
    assert record.outcome == "success"
    assert record.tokens_out == 16  # known from the usage Sluice asked for on its own
    assert record.tokens_in > 0
    assert record.upstream_model == "big"


def test_streaming_usage_chunk_reaches_a_client_that_asked(sdk):
    stream = sdk.chat.completions.create(
        model="fast", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 16


def test_completions_and_embeddings_are_proxied(sdk):
    completion = sdk.completions.create(model="fast", prompt="Once upon", max_tokens=5)
    assert completion.usage.completion_tokens == 5
    embedding = sdk.embeddings.create(model="fast", input=["a", "b"])
    assert [e.index for e in embedding.data] == [0, 1]


def test_full_model_falls_back_to_the_next_in_the_chain(sdk, call_record, big_full):
    raw = sdk.chat.completions.with_raw_response.create(model="smart", messages=MESSAGES)

    assert raw.headers["x-sluice-served-model"] == "medium"
    assert raw.headers["x-sluice-attempts"] == "2"
    record = call_record(raw.headers["x-sluice-request-id"])
    assert record.served_deployment == "medium"
    assert record.upstream_model == "medium"
    attempts = list(record.attempts.values_list("deployment", "status_code", "error_class"))
    assert attempts == [("big", 503, "capacity"), ("medium", 200, "")]


def test_streaming_falls_back_before_the_first_byte(sdk, big_full):
    with sdk.chat.completions.with_streaming_response.create(
        model="smart", messages=MESSAGES, stream=True
    ) as response:
        assert response.headers["x-sluice-served-model"] == "medium"
        assert response.headers["x-sluice-attempts"] == "2"
        assert len(list(response.parse())) > 1


def test_every_deployment_full_answers_503_with_retry_after(sdk, call_record):
    with pytest.raises(openai.APIStatusError) as caught:
        sdk.chat.completions.create(model="full", messages=MESSAGES)
    response = caught.value.response
    assert response.status_code == 503
    assert int(response.headers["retry-after"]) >= 1
    assert response.json()["error"]["code"] == "capacity_exhausted"
    record = call_record(response.headers["x-sluice-request-id"])
    assert record.outcome == "capacity_exhausted"
    assert "at capacity" in response.json()["error"]["message"]
    # While the adaptive limit was above 1, each "at capacity" cut it once (Sluice's own
    # concurrency could be the cause: the call queued again, not counted); at the floor,
    # the route's max_attempts (3), backing off in between.
    attempts = list(record.attempts.order_by("number"))
    assert len(attempts) >= 3
    assert {a.error_class for a in attempts} == {"capacity"}
    assert record.retries == record.attempt_count - 1


def test_models_lists_only_the_routes_the_application_may_use(sdk):
    listed = {m.id for m in sdk.models.list()}
    assert {"fast", "full", "slow", "smart"} <= listed
    assert "secret" not in listed
    assert sdk.models.retrieve("smart").id == "smart"
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("secret")


def test_revoked_key_is_refused_within_five_seconds(gateway, issue_key, committed_db):
    from accounts.services import key_revoke

    key = issue_key()
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key.plaintext, max_retries=0)
    client.chat.completions.create(model="fast", messages=MESSAGES)  # now cached as valid

    key_revoke(prefix=key.prefix)
    revoked_at = time.monotonic()
    wait_until(lambda: _refused(client), timeout=5, every=0.2)
    assert time.monotonic() - revoked_at < 5


def _refused(client: openai.OpenAI) -> bool:
    try:
        client.chat.completions.create(model="fast", messages=MESSAGES)
    except openai.AuthenticationError:
        return True
    return False


def test_without_redis_a_key_revoked_by_another_process_is_refused_at_once(
    e2e_database: str, issue_key, committed_db
):
    """The gateway keeps a key for 60 s; `manage.py revoke_key`, a process of its own,
    writes the change to the database's change log, which the gateway reads twice a
    second. Without the log the key would be served until its 60 s were up."""
    no_redis = {"REDIS_URL": "", "DATABASE_URL": e2e_database}
    gateway = start_gateway(e2e_database, extra_env={**no_redis, "SLUICE_KEY_CACHE_SECONDS": "60"})
    handle = next(gateway)
    try:
        key = issue_key()
        client = openai.OpenAI(base_url=f"{handle.url}/v1", api_key=key.plaintext, max_retries=0)
        client.chat.completions.create(model="fast", messages=MESSAGES)  # now cached as valid
        subprocess.run(
            [sys.executable, "manage.py", "revoke_key", key.prefix],
            cwd=ROOT, env=os.environ | no_redis, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        revoked_at = time.monotonic()
        wait_until(lambda: _refused(client), timeout=10, every=0.1)
        assert time.monotonic() - revoked_at < 3
    finally:
        next(gateway, None)


def test_expired_key_is_refused(gateway, issue_key, committed_db):
    from django.utils import timezone

    from accounts.models import ApiKey

    key = issue_key(expires_days=1)
    ApiKey.objects.filter(prefix=key.prefix).update(expires_at=timezone.now())
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key.plaintext}"},
        json={"model": "fast", "messages": MESSAGES},
    )
    assert response.status_code == 401
    assert "expired" in response.json()["error"]["message"]


def test_client_hanging_up_mid_stream_cancels_upstream_and_is_audited(
    gateway, issue_key, slow_simulator: SimulatorHandle, call_record
):
    key = issue_key()
    with httpx.stream(
        "POST",
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key.plaintext}"},
        json={"model": "slow", "messages": MESSAGES, "stream": True},
    ) as response:
        request_id = response.headers["x-sluice-request-id"]
        lines = response.iter_lines()
        received = [line for line, _ in zip(lines, range(6), strict=False) if line]
    assert received  # a few chunks arrived, then the client hung up

    record = call_record(request_id)
    assert record.outcome == "client_cancelled"
    assert 0 < record.tokens_out < 40  # counted so far, not the full 40
    assert record.tokens_in > 0
    # The upstream request was cancelled too: the slot is free long before 40 x 50 ms.
    wait_until(lambda: slow_simulator.stats("slow")["in_flight"] == 0, timeout=1.5)


BAD_INPUTS = [
    # (description, headers, body, status, code or None, param or None)
    ("malformed json", {}, b"{not json", 400, None, None),
    ("body not an object", {}, b"[1, 2]", 400, None, None),
    ("missing model", {}, {"messages": MESSAGES}, 400, None, "model"),
    ("model not a string", {}, {"model": 7, "messages": MESSAGES}, 400, None, "model"),
    ("unknown model", {}, {"model": "nope", "messages": MESSAGES}, 404, "model_not_found", "model"),
    (
        "model not allowed",
        {},
        {"model": "secret", "messages": MESSAGES},
        403,
        "model_not_allowed",
        "model",
    ),
    (
        "stream not a boolean",
        {},
        {"model": "fast", "messages": MESSAGES, "stream": "yes"},
        400,
        None,
        "stream",
    ),
    (
        "max_tokens not an integer",
        {},
        {"model": "fast", "messages": MESSAGES, "max_tokens": "9"},
        400,
        None,
        "max_tokens",
    ),
    ("messages missing", {}, {"model": "fast"}, 400, None, "messages"),
    (
        "bad priority header",
        {"x-sluice-priority": "urgent"},
        {"model": "fast", "messages": MESSAGES},
        400,
        None,
        "X-Sluice-Priority",
    ),
]


@pytest.mark.parametrize(
    ("headers", "body", "status", "code", "param"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_bad_input_gets_an_openai_shaped_error(
    gateway, issue_key, call_record, headers, body, status, code, param
):
    key = issue_key()
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={
            "authorization": f"Bearer {key.plaintext}",
            "content-type": "application/json",
            **headers,
        },
        content=content,
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert error["message"]
    assert error["param"] == param
    if code:
        assert error["code"] == code
    assert key.plaintext not in response.text
    record = call_record(response.headers["x-sluice-request-id"])
    assert record.status_code == status
    assert record.attempt_count == 0  # refused before any upstream call


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, "Missing API key"),
        ({"authorization": "Bearer sk-sluice-000000000000-" + "x" * 43}, "Invalid API key"),
        ({"authorization": "Bearer not-a-sluice-key"}, "Invalid API key"),
        ({"x-api-key": "sk-sluice-zzz"}, "Invalid API key"),
    ],
)
def test_missing_or_unknown_key_is_401(gateway, headers, expected):
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers=headers,
        json={"model": "fast", "messages": MESSAGES},
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"
    assert expected in response.json()["error"]["message"]
    assert response.headers["x-sluice-request-id"].startswith("req_")


def test_x_api_key_header_is_accepted(gateway, issue_key):
    key = issue_key()
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"x-api-key": key.plaintext},
        json={"model": "fast", "messages": MESSAGES},
    )
    assert response.status_code == 200


def test_oversized_body_is_413_before_it_is_read(gateway: GatewayHandle, issue_key):
    key = issue_key()
    big = "x" * (gateway.max_body_bytes + 1)
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key.plaintext}"},
        json={"model": "fast", "messages": [{"role": "user", "content": big}]},
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_wrong_method_and_unknown_path_answer_in_openai_shape(gateway):
    wrong_method = httpx.get(f"{gateway.url}/v1/chat/completions")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    unknown = httpx.post(f"{gateway.url}/v1/assistants", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "unknown_url"


def test_health_check_answers_without_a_key(gateway):
    response = httpx.get(f"{gateway.url}/healthz")
    checks = {"worker": "ok", "database": "ok"} | ({"redis": "ok"} if REDIS else {})
    assert (response.status_code, response.json()) == (200, {"status": "ok", "checks": checks})
    live = httpx.get(f"{gateway.url}/healthz/live")
    assert (live.status_code, live.json()) == (200, {"status": "ok"})
