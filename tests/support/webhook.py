"""A webhook receiver on loopback: what the alerts post (Slack's and Teams' incoming webhook
shape), for the tests to read."""

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Webhook:
    url: str
    messages: list[dict] = field(default_factory=list)  # {"content_type", "json"} per post


def start_webhook() -> Iterator[Webhook]:
    """Yields a receiver taking POSTs at its `url`; stops it when resumed (`yield from` it
    in a fixture)."""
    hook = Webhook(url="")

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            hook.messages.append(
                {"content_type": self.headers["Content-Type"], "json": json.loads(body)}
            )
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    hook.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()
