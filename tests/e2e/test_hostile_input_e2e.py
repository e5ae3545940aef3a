"""Hostile and unlucky input against a real server: never a 500, an answer in
OpenAI's shape naming the field, the audit trail unharmed, and a request id on every answer."""

import json
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support import GatewayHandle, free_port, start_gateway

MESSAGES = [{"role": "user", "content": "hi"}]
DEEP = b"[" * 10_000 + b"]" * 10_000


def _body(endpoint: str, **fields) -> dict:
    base = {"chat/completions": {"messages": MESSAGES}, "completions": {"prompt": "hi"}}
    return {"model": "fast", **base.get(endpoint, {"input": "hi"}), **fields}


def _raw(endpoint: str, extra: bytes) -> bytes:
    """A valid body with `extra` (raw JSON text: `"name": value`) added."""
    return json.dumps(_body(endpoint)).encode()[:-1] + b", " + extra + b"}"


ENDPOINTS = ["chat/completions", "completions", "embeddings"]
# name, body for an endpoint, the param named (None: the body as a whole)
BAD_INPUTS = [
    ("nested 10,000 deep", lambda e: DEEP, None),
    ("nested field", lambda e: _raw(e, b'"metadata": ' + DEEP), None),
    ("nested object", lambda e: b'{"a":' * 10_000 + b"1" + b"}" * 10_000, None),
    ("max_tokens 10**400", lambda e: _raw(e, b'"max_tokens": 1' + b"0" * 400), "max_tokens"),
    ("n 10**400", lambda e: _raw(e, b'"n": 1' + b"0" * 400), "n"),
    ("5,000 digits", lambda e: _raw(e, b'"seed": ' + b"9" * 5000), None),
    ("NaN", lambda e: _raw(e, b'"temperature": NaN'), "temperature"),
    ("Infinity", lambda e: _raw(e, b'"top_p": -Infinity'), "top_p"),
    ("1e400", lambda e: _raw(e, b'"temperature": 1e400'), "temperature"),
    ("lone surrogate", lambda e: json.dumps(_body(e, model="fast\ud800")).encode(), "model"),
]


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(
    ("body", "param"), [c[1:] for c in BAD_INPUTS], ids=[c[0] for c in BAD_INPUTS]
)
def test_hostile_body_is_a_400_in_openai_shape(gateway, issue_key, endpoint, body, param):
    key = issue_key()
    response = httpx.post(
        f"{gateway.url}/v1/{endpoint}",
        headers={"authorization": f"Bearer {key.plaintext}", "content-type": "application/json"},
        content=body(endpoint),
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert response.headers["x-sluice-request-id"].startswith("req_")


def test_a_poisoned_model_name_leaves_the_audit_trail_working(gateway, issue_key, call_record):
    """`"fast\\ud800"` once stopped a worker's audit writer for good."""
    key = issue_key()
    headers = {"authorization": f"Bearer {key.plaintext}", "content-type": "application/json"}
    poison = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers=headers,
        content=b'{"model": "fast\\ud800", "messages": [{"role": "user", "content": "x"}]}',
    )
    assert poison.status_code == 400
    assert call_record(poison.headers["x-sluice-request-id"]).status_code == 400
    ids = []
    for _ in range(5):
        ok = httpx.post(
            f"{gateway.url}/v1/chat/completions", headers=headers, json=_body("chat/completions")
        )
        assert ok.status_code == 200
        ids.append(ok.headers["x-sluice-request-id"])
    assert all(call_record(i).status_code == 200 for i in ids)


@pytest.mark.parametrize("value", ["1e-300", "-1", "NaN", "garbage", "0", "inf", "0.01"])
def test_bad_max_wait_header_is_a_400_naming_it(gateway, issue_key, value):
    key = issue_key()
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key.plaintext}", "x-sluice-max-wait": value},
        json=_body("chat/completions"),
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "X-Sluice-Max-Wait")


def test_every_answer_carries_a_request_id(gateway, issue_key):
    key = issue_key()
    auth = {"authorization": f"Bearer {key.plaintext}"}
    answers = {
        "models": httpx.get(f"{gateway.url}/v1/models", headers=auth),
        "model": httpx.get(f"{gateway.url}/v1/models/fast", headers=auth),
        "models 401": httpx.get(f"{gateway.url}/v1/models"),
        "401": httpx.post(f"{gateway.url}/v1/chat/completions", json={}),
        "404": httpx.post(f"{gateway.url}/v1/assistants", json={}),
        "405": httpx.get(f"{gateway.url}/v1/chat/completions"),
        "413": httpx.post(
            f"{gateway.url}/v1/embeddings",
            headers=auth,
            content=b"x" * (gateway.max_body_bytes + 1),
        ),
    }
    expected = {"models": 200, "model": 200, "models 401": 401, "401": 401}
    expected |= {"404": 404, "405": 405, "413": 413}
    assert {name: r.status_code for name, r in answers.items()} == expected
    ids = [r.headers.get("x-sluice-request-id", "") for r in answers.values()]
    assert all(i.startswith("req_") for i in ids), ids
    assert len(set(ids)) == len(ids)


def test_refusals_for_unknown_keys_are_sampled_in_the_audit(gateway, committed_db):
    """A flood of made-up keys costs a few rows a second, not one each; the count of
    those left out rides on the next one recorded."""
    from routing.models import CallRecord

    started = time.time()
    marker = uuid.uuid4().hex[:8]

    def made_up(i: int) -> int:
        key = f"sk-sluice-{uuid.uuid4().hex[:12]}-{marker}{i:035d}"
        return client.post(
            "/v1/chat/completions",
            headers={"authorization": f"Bearer {key}"},
            json=_body("chat/completions"),
        ).status_code

    # A flood comes at once (a made-up prefix waits for the next load of every prefix,
    # at most one a second: one after the other, 60 would take a minute).
    with httpx.Client(base_url=gateway.url) as client, ThreadPoolExecutor(20) as pool:
        assert set(pool.map(made_up, range(60))) == {401}
        time.sleep(1.1)
        last = client.post("/v1/chat/completions", json=_body("chat/completions"))
    elapsed = time.time() - started
    record = CallRecord.objects.filter(request_id=last.headers["x-sluice-request-id"])
    deadline = time.monotonic() + 10
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "like it not recorded" in record.get().error_message
    rows = CallRecord.objects.filter(outcome="unauthorized", created_at__gte=_utc(started)).count()
    assert rows <= 5 * (elapsed + 1) and rows < 60


def _utc(ts: float):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts - 0.5, UTC)


@pytest.fixture(scope="module")
def impatient_gateway(e2e_database: str) -> Iterator[GatewayHandle]:
    """Headers and body must each arrive within one second."""
    env = {"SLUICE_BODY_SECONDS": "1", "SLUICE_HEADER_TIMEOUT": "1"}
    yield from start_gateway(e2e_database, extra_env=env)


def _address(gateway: GatewayHandle) -> tuple[str, int]:
    host, port = gateway.url.removeprefix("http://").split(":")
    return host, int(port)


def test_a_connection_that_never_speaks_is_closed(impatient_gateway):
    with socket.create_connection(_address(impatient_gateway), timeout=5) as sock:
        started = time.monotonic()
        assert sock.recv(100) == b""  # closed by the server
    assert 0.8 < time.monotonic() - started < 4


def test_headers_trickled_a_byte_at_a_time_get_408_and_the_connection_closed(impatient_gateway):
    request = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100
    with socket.create_connection(_address(impatient_gateway), timeout=5) as sock:
        started = time.monotonic()
        answer = b""
        try:
            for byte in request:
                sock.sendall(bytes([byte]))
                time.sleep(0.1)
        except OSError:
            pass  # closed under us: what we want
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"request_timeout" in answer
    assert time.monotonic() - started < 4


def _read_answer(sock: socket.socket) -> bytes:
    """One whole answer off a kept-alive connection: its head, then its body by its
    Content-Length or to the chunked body's last chunk (the body may come in a later
    packet than the head)."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    lengths = [
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    ]
    while not (len(body) >= lengths[0] if lengths else body.endswith(b"0\r\n\r\n")):
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_later_requests_headers_are_due_a_full_bound_after_its_own_first_byte(
    impatient_gateway, issue_key
):
    """On a kept-alive connection the bound runs from each request's first byte: the
    second request, begun 0.7 s in, is cut about a second later, not at the first one's."""
    key = issue_key()
    first = (
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: Bearer {key.plaintext}\r\n\r\n".encode()
    )
    with socket.create_connection(_address(impatient_gateway), timeout=5) as sock:
        sock.sendall(first)
        assert _read_answer(sock).startswith(b"HTTP/1.1 200")
        time.sleep(0.7)
        started = time.monotonic()
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: a")  # never ends
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert 0.8 < time.monotonic() - started < 4


def test_a_client_that_sends_its_request_in_time_is_served(impatient_gateway, issue_key):
    key = issue_key()
    with httpx.Client(base_url=impatient_gateway.url) as client:
        for _ in range(2):  # also on a kept-alive connection
            response = client.get(
                "/v1/models", headers={"authorization": f"Bearer {key.plaintext}"}
            )
            assert response.status_code == 200
            time.sleep(1.5)  # idle between requests is the keep-alive's business, not ours


def test_a_body_shorter_than_its_content_length_is_answered_408(impatient_gateway, issue_key):
    key = issue_key()
    with socket.create_connection(_address(impatient_gateway), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
            + f"Authorization: Bearer {key.plaintext}\r\n".encode()
            + b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model": '
        )
        started = time.monotonic()
        answer = b""
        while chunk := sock.recv(4096):  # answered, then closed
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"request_timeout" in answer and b"x-sluice-request-id" in answer.lower()
    assert time.monotonic() - started < 4


def _silent_listener() -> tuple[socket.socket, int]:
    """A port that accepts TCP connections and never says a word (a hung database)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1000)
    return sock, sock.getsockname()[1]


@pytest.mark.parametrize("database", ["closed port", "silent"])
def test_database_away_and_a_cold_key_is_a_quick_503_never_a_500(database, tmp_path):
    """No worker has the key cached and PostgreSQL does not answer: 503 with Retry-After
    within the request path's short wait, and no flood of unretrieved task errors. Told to
    stop, the gateway leaves the calls it could not write to its spool and exits by itself
    (not after its supervisor's patience, at every try waiting out the pool's timeout)."""
    listener = None
    if database == "silent":
        listener, port = _silent_listener()
    else:
        port = free_port()
    url = f"postgres://postgres@127.0.0.1:{port}/nowhere?connect_timeout=30"
    env = {"SLUICE_DB_REQUEST_SECONDS": "1", "SLUICE_AUDIT_SPOOL_DIR": str(tmp_path)}
    ids = []
    with tempfile.TemporaryFile() as log:
        runs = start_gateway(url, stderr=log, extra_env=env)
        gateway = next(runs)
        try:
            key = f"sk-sluice-{uuid.uuid4().hex[:12]}-" + "x" * 43
            for path, method in [("/v1/chat/completions", "POST"), ("/v1/models", "GET")] * 3:
                started = time.monotonic()
                response = httpx.request(
                    method,
                    f"{gateway.url}{path}",
                    headers={"authorization": f"Bearer {key}"},
                    json=_body("chat/completions"),
                    timeout=30,
                )
                took = time.monotonic() - started
                assert response.status_code == 503, response.text
                assert response.json()["error"]["code"] == "database_unavailable"
                assert int(response.headers["retry-after"]) >= 1
                assert response.headers["x-sluice-request-id"].startswith("req_")
                assert took < 3
                if method == "POST":  # a call (a list of models is not audited)
                    ids.append(response.headers["x-sluice-request-id"])
        finally:
            stopping = time.monotonic()
            next(runs, None)  # stops the gateway: SIGTERM, SIGKILL after 10 s
            stopped_in = time.monotonic() - stopping
            if listener is not None:
                listener.close()
        log.seek(0)
        output = log.read().decode(errors="replace")
    sys.stderr.write(output[-2000:])
    assert "Task exception was never retrieved" not in output
    assert " 500 " not in output
    assert stopped_in < 9, f"stopped after {stopped_in:.1f} s: killed, not exited"
    spooled = b"".join(path.read_bytes() for path in tmp_path.rglob("*.jsonl"))
    assert all(request_id.encode() in spooled for request_id in ids)
