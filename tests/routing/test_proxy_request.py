"""The proxy's lean request reads a scope as Django's ASGIRequest does, for what the views
read: method, path, headers by lower-case name (repeated ones joined, underscored ones left
out), body and client address."""

import io

from django.core.handlers.asgi import ASGIRequest

from routing.request_path.proxy_handler import ProxyRequest

SCOPE = {
    "type": "http",
    "method": "post",
    "path": "/v1/chat/completions",
    "query_string": b"a=1",
    "root_path": "",
    "client": ("10.1.2.3", 5555),
    "server": ("127.0.0.1", 8000),
    "headers": [
        (b"authorization", b"Bearer sk-sluice-abc"),
        (b"X-Sluice-Priority", b"batch"),
        (b"openai-beta", b"one"),
        (b"openai-beta", b"two"),
        (b"x_api_key", b"spoofed"),  # an underscore: dropped, as Django drops it
        (b"user-agent", "caf\u00e9".encode("latin-1")),
    ],
}
BODY = b'{"model": "m"}'


def test_the_lean_request_reads_what_djangos_request_reads():
    lean = ProxyRequest(SCOPE, BODY)
    django = ASGIRequest(SCOPE, io.BytesIO(BODY))
    assert (lean.method, lean.path, lean.path_info) == (
        django.method,
        django.path,
        "/v1/chat/completions",
    )
    assert lean.body == django.body == BODY
    assert lean.META["REMOTE_ADDR"] == django.META["REMOTE_ADDR"] == "10.1.2.3"
    names = [
        "authorization", "x-sluice-priority", "openai-beta", "x-api-key", "x_api_key",
        "user-agent", "traceparent",
    ]  # fmt: skip
    assert {n: lean.headers.get(n) for n in names} == {n: django.headers.get(n) for n in names}
    assert lean.headers["openai-beta"] == "one,two"
    assert "x-api-key" not in lean.headers and "x_api_key" not in lean.headers
