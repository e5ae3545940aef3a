"""Bodies outside /v1/ (console, management API, admin) under real uvicorn: a body over
SLUICE_CONSOLE_MAX_BODY_BYTES is refused while it arrives, never buffered; a body trickled
slower than SLUICE_BODY_SECONDS is cut. The worker's memory is read from /proc (VmRSS before,
VmHWM, the peak, after), and the figures are printed (`pytest -s`)."""

import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import GatewayHandle, start_gateway

MB = 1024 * 1024
BIG = 300 * MB
CHUNK = b"a=" + b"x" * (MB - 2)


@pytest.fixture(scope="module")
def bounded_gateway(e2e_database: str) -> Iterator[GatewayHandle]:
    """The defaults (4 MB), except bodies must arrive within 2 s (the default is 30)."""
    yield from start_gateway(e2e_database, extra_env={"SLUICE_BODY_SECONDS": "2"})


def _kb(pid: int, field: str) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.M).group(1))  # type: ignore[union-attr]


def _address(gateway: GatewayHandle) -> tuple[str, int]:
    host, port = gateway.url.removeprefix("http://").split(":")
    return host, int(port)


def _csrf(gateway: GatewayHandle) -> str:
    return httpx.get(f"{gateway.url}/login/").cookies["csrftoken"]


def _post(gateway: GatewayHandle, path: str, *, chunked: bool, headers: str = "") -> bytes:
    """POST 300 MB (announced, or chunked with no length), stop when the server hangs up;
    what it answered."""
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}"
    head += "Content-Type: application/x-www-form-urlencoded\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {BIG}\r\n\r\n"
    frame = b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK) if chunked else CHUNK
    answer = b""
    with socket.create_connection(_address(gateway), timeout=10) as sock:
        sock.sendall(head.encode())
        try:
            for _ in range(BIG // MB):
                sock.sendall(frame)
        except OSError:
            pass  # the server closed the connection under us: what we want
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
    return answer


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_300_mb_to_the_login_page_is_refused_without_buffering_it(
    bounded_gateway: GatewayHandle, chunked: bool
) -> None:
    token = _csrf(bounded_gateway)
    pid = bounded_gateway.pid
    before = _kb(pid, "VmRSS")
    started = time.monotonic()
    answer = _post(
        bounded_gateway,
        "/login/",
        chunked=chunked,
        headers=f"Cookie: csrftoken={token}\r\nX-CSRFToken: {token}\r\n",
    )
    took = time.monotonic() - started
    peak = _kb(pid, "VmHWM")
    print(
        f"\n300 MB POST /login/ ({'chunked' if chunked else 'Content-Length'}): "
        f"RSS before {before / 1024:.0f} MB, peak after {peak / 1024:.0f} MB, "
        f"answer {answer[:12]!r} in {took:.2f} s"
    )
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"larger than the limit of 4194304 bytes" in answer
    assert peak - before < 40 * 1024, (before, peak)  # kB: far from the body's 300 MB


def test_300_mb_to_the_api_without_credentials_is_a_413_in_the_apis_shape(
    bounded_gateway: GatewayHandle,
) -> None:
    answer = _post(bounded_gateway, "/api/v1/teams/", chunked=False)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b'"code": "request_too_large"' in answer and b'"type": "invalid_request_error"' in answer


@pytest.mark.parametrize(
    "path", ["/login/", "/api/v1/teams/", "/admin/login/", "/v1/chat/completions"]
)
def test_a_body_trickled_a_byte_at_a_time_is_cut_after_the_body_deadline(
    bounded_gateway: GatewayHandle, path: str
) -> None:
    with socket.create_connection(_address(bounded_gateway), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n\r\n".encode()
        )
        started = time.monotonic()
        answer = b""
        try:
            for _ in range(20):  # a byte every half second: 10 s if nobody stops it
                sock.sendall(b"a")
                sock.settimeout(0.5)
                try:
                    if chunk := sock.recv(65536):
                        answer += chunk
                        break
                except TimeoutError:
                    continue
            sock.settimeout(5)
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
    took = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert 1.5 < took < 4, took


def test_a_form_under_the_limit_is_served(bounded_gateway: GatewayHandle) -> None:
    with httpx.Client(base_url=bounded_gateway.url) as client:
        token = client.get("/login/").cookies["csrftoken"]
        response = client.post(
            "/login/",
            data={"username": "nobody@example.com", "password": "x" * (3 * MB)},
            headers={"X-CSRFToken": token},
        )
    assert response.status_code == 200  # the form again, with its error: not a 413
