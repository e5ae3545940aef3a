"""What the alerts share (the capacity alert and the budget alert): the webhook post, and
the loop every worker runs, each evaluation on a thread (they read the database)."""

import asyncio
import json
import logging
import urllib.error
import urllib.request
from collections.abc import Callable

from asgiref.sync import sync_to_async
from django.db import close_old_connections

log = logging.getLogger("sluice.alert")


def post_webhook(url: str, text: str, *, timeout: float = 5.0) -> None:
    """POST {"text": ...} as JSON (Slack's and Teams' incoming webhooks, and most chat tools,
    take it)."""
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        response.read()


def deliver(url: str, text: str, send: Callable[[str, str], None], what: str) -> None:
    """Post `text` when a webhook is set. Not retried: the log keeps it, and the next
    crossing sends again."""
    if not url:
        return
    try:
        send(url, text)
    except (OSError, urllib.error.URLError) as exc:
        log.error("%s alert webhook failed: %s", what, exc)


async def alert_loop(check: Callable[[], object], every: float, what: str) -> None:
    """Run by every worker from startup; a lock in the check lets one of them take each
    evaluation."""

    def in_thread() -> None:
        close_old_connections()
        try:
            check()
        finally:
            close_old_connections()

    while True:
        await asyncio.sleep(every)
        try:
            await sync_to_async(in_thread, thread_sensitive=False)()
        except Exception:
            log.exception("%s alert check failed; trying again in %s s", what, every)
