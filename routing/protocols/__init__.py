"""Client protocols: the shapes a client may speak to Sluice.

Every call goes through one request path (routing/proxy.py) in chat-completions shape. A
client protocol other than OpenAI's translates at the two ends of that path only:

    parse(raw)            the client's body → a chat-completions `ClientRequest` (or a
                          GatewayError 400 naming the field that cannot be translated)
    answer(payload, req)  the upstream's chat completion (a dict) → the client's body
    stream(req)           a `StreamTranslator`: chat stream events → the client's events
    error(status, body)   an error body in OpenAI's shape → the client's error body

Keys, limits, priority, the chain walk (and its fallback across upstream kinds) and the
audit never see the client's shape. `OPENAI` is the identity: chat, completions and
embeddings as they are.
"""

import contextlib
import json
from typing import Any, Protocol

from routing.payloads import ClientRequest, Endpoint, parse_request
from routing.stream_tap import data_of


class StreamTranslator(Protocol):
    def feed(self, event: dict[str, Any]) -> bytes:
        """One chat-completions stream event (a parsed `data:` object: a chunk, or
        `{"error": {...}}`) → the client's bytes for it (whole server-sent events, maybe
        none)."""

    def end(self) -> bytes:
        """After the last event (the upstream's `[DONE]` or the stream's end): the client's
        closing events."""


class ClientProtocol:
    """OpenAI's own shapes: nothing to translate."""

    name = "openai"  # recorded in the audit (CallRecord.client_protocol)
    endpoint: str | None = None  # the audit's `endpoint` (None: the Endpoint's own)
    translates = False  # answers go through answer()/stream()/error()

    def parse(self, endpoint: Endpoint, raw: bytes) -> ClientRequest:
        return parse_request(endpoint, raw)

    def answer(self, payload: dict[str, Any], request: ClientRequest) -> bytes:
        return json.dumps(payload).encode()

    def stream(self, request: ClientRequest) -> StreamTranslator | None:
        return None

    def error(self, status: int, body: bytes) -> bytes:
        return body


OPENAI = ClientProtocol()


class TranslatedStream:
    """A streaming answer's body in the client's protocol: the relay's chat events (whole
    server-sent events, usage included) through the protocol's translator. `close()` is the
    relay's, so a stream never started is still settled and audited."""

    def __init__(self, relay: Any, translator: StreamTranslator) -> None:
        self.relay, self.translator = relay, translator

    def close(self) -> None:
        self.relay.close()

    def __aiter__(self) -> Any:
        return self._run()

    async def _run(self) -> Any:
        async with contextlib.aclosing(self.relay.__aiter__()) as events:
            async for out in events:
                translated = b"".join(self._each(out))
                if translated:
                    yield translated
        tail = self.translator.end()
        if tail:
            yield tail

    def _each(self, out: bytes) -> Any:
        for event in out.split(b"\n\n"):
            data = data_of(event)
            if data is None or data == b"[DONE]":
                continue
            try:
                payload = json.loads(data)
            except ValueError:
                continue  # the relay only passes JSON on; nothing to say for anything else
            if isinstance(payload, dict):
                yield self.translator.feed(payload)
