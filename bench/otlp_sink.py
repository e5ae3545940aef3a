"""An OTLP/HTTP endpoint that takes traces and discards them: what a traced gateway exports
to in a benchmark (bench/overhead.py --only tracing). `GET /stats` says how many export
requests and bytes it took.

    .venv/bin/python bench/otlp_sink.py --port PORT
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

taken = {"requests": 0, "bytes": 0}
lock = threading.Lock()


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a collector would

    def do_POST(self) -> None:
        size = int(self.headers.get("content-length", 0))
        self.rfile.read(size)
        with lock:
            taken["requests"] += 1
            taken["bytes"] += size
        self._answer(b"", "application/x-protobuf")

    def do_GET(self) -> None:
        self._answer(json.dumps(taken).encode(), "application/json")

    def _answer(self, body: bytes, content_type: str) -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    port = parser.parse_args().port
    ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()


if __name__ == "__main__":
    main()
