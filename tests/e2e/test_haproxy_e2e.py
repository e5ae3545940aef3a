"""Two gateways behind HAProxy with the shipped `deploy/haproxy.cfg` (addresses and ports
swapped for the test's): one is stopped with SIGTERM while streams run through HAProxy; the
streams finish, every new call is answered 200 by the other gateway, and HAProxy's
readiness check takes the stopped one out."""

import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

import httpx
import pytest

from tests.support import ROOT, free_port, start_gateway, wait_until

HI = [{"role": "user", "content": "Keep streaming."}]


def _config(port: int, gateways: list[int], stats: Path) -> str:
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    text = text.replace("    bind :8080", f"    bind 127.0.0.1:{port}")
    text = text.replace(
        "    maxconn 20000", f"    maxconn 20000\n    stats socket {stats} level admin"
    )
    text = text.replace("inter 2s", "inter 500ms")  # the test's patience, not production's
    text = text.replace("maxconn 20000", "maxconn 2000")  # within this shell's file limit
    for n, gateway in enumerate(gateways, 1):
        text = text.replace(f"gateway{n}:8000", f"127.0.0.1:{gateway}")
    assert all(f"127.0.0.1:{g}" in text for g in gateways) and f":{port}" in text
    return text


def _servers(stats: Path) -> dict[str, dict[str, str]]:
    """HAProxy's `show stat` per server of the gateways backend."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(stats))
        s.sendall(b"show stat\n")
        data = b"".join(iter(lambda: s.recv(65536), b""))
    rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
    return {r["svname"]: r for r in rows if r["pxname"] == "gateways" and r["svname"][-1].isdigit()}


def _stream(url: str, key: str, out: list[bytes]) -> None:
    with httpx.stream(
        "POST",
        f"{url}/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "slow", "messages": HI, "stream": True},
        timeout=30,
    ) as response:
        out.append(b"".join(response.iter_raw()))


def test_a_gateway_stopped_behind_haproxy_costs_no_call(e2e_database: str, issue_key, committed_db):
    if not shutil.which("haproxy"):
        print("skipped: haproxy is not installed")
        pytest.skip("haproxy is not installed (apt-get install -y haproxy)")
    gateways = [start_gateway(e2e_database) for _ in range(2)]
    handles = [next(g) for g in gateways]
    folder = Path(tempfile.mkdtemp(prefix="sluice-haproxy-"))
    port, stats = free_port(), folder / "stats.sock"
    (folder / "haproxy.cfg").write_text(
        _config(port, [h.url.rsplit(":", 1)[1] for h in handles], stats)
    )
    log = (folder / "haproxy.log").open("w")
    proxy = subprocess.Popen(
        ["haproxy", "-db", "-f", str(folder / "haproxy.cfg")],
        stdout=log,  # its request log: the failure's story
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        key = issue_key().plaintext
        wait_until(
            lambda: stats.exists() and all(s["status"] == "UP" for s in _servers(stats).values())
        )
        streams: list[list[bytes]] = [[] for _ in range(4)]
        threads = [threading.Thread(target=_stream, args=(url, key, out)) for out in streams]
        for thread in threads:
            thread.start()
        # Stop a gateway that is serving a stream (leastconn spreads them).
        busy = wait_until(
            lambda: [n for n, s in _servers(stats).items() if int(s["scur"]) > 0], timeout=5
        )
        stopped = handles[int(busy[0][-1]) - 1]
        os.kill(stopped.pid, signal.SIGTERM)
        answers = [
            httpx.post(
                f"{url}/v1/chat/completions",
                headers={"authorization": f"Bearer {key}"},
                json={"model": "fast", "messages": HI},
                timeout=10,
            ).status_code
            for _ in range(20)
        ]
        for thread in threads:
            thread.join(15)
        assert answers == [200] * 20, (folder / "haproxy.log").read_text()[-3000:]
        assert all(out and out[0].rstrip().endswith(b"data: [DONE]") for out in streams)
        wait_until(lambda: _servers(stats)[busy[0]]["status"].startswith("DOWN"), timeout=5)
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        log.close()
        for gateway in gateways:
            next(gateway, None)
        shutil.rmtree(folder, ignore_errors=True)
