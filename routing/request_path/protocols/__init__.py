"""Client protocols: the shapes a client may speak to Sluice.

A client protocol speaks natively to the deployments of its own `kind` (Messages to
`anthropic`, Responses to `openai-responses`, chat to `openai`): its body goes there as it
came and the answer comes back as it is (routing/request_path/protocols/native.py); the request path
reads only the model, the stream flag, the token ceiling and the usage. Only a chain that
crosses kinds needs the chat-completions shape, and then the protocol translates at the two
ends of the path:

    parse(raw)            the client's body → a `ClientRequest` (its native body kept)
    translate(req, rules) the native body → chat completions, degrading what has no
                          counterpart by a documented rule (`Degrade`; a strict route
                          refuses instead, naming the field)
    answer(payload, req)  a chat completion (a dict) → the client's body
    stream(req)           a `StreamTranslator`: chat stream events → the client's events
    error(status, body)   an error body in OpenAI's shape → the client's error body

Keys, limits, priority, the chain walk and the audit never see the client's shape.
`OPENAI` is the identity: chat, completions and embeddings as they are.
"""

import contextlib
import json
from typing import Any, Protocol

from core.errors import bad_request
from routing.request_path.payloads import ClientRequest, Endpoint, parse_request
from routing.request_path.stream_tap import data_of


class Degrade:
    """What a translation changes because the other side has no equivalent: noted (and
    recorded on the call's audit row), or, on a route set to `translation = "strict"`,
    refused with a 400 naming the field."""

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self.notes: list[str] = []

    def note(self, param: str, rule: str) -> None:
        if self.strict:
            raise bad_request(
                f"'{param}' has no equivalent on this route's deployments ({rule}); "
                "the route translates strictly.",
                param=param,
            )
        note = f"{param}: {rule}"
        if note not in self.notes:
            self.notes.append(note)


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
    kind = "openai"  # the upstream kind (Upstream.Kind) that speaks it natively
    endpoint: str | None = None  # the audit's `endpoint` (None: the Endpoint's own)
    translates = False  # answers from other kinds go through answer()/stream()/error()

    def parse(self, endpoint: Endpoint, raw: bytes) -> ClientRequest:
        return parse_request(endpoint, raw)

    def translate(self, request: ClientRequest, degrade: Degrade) -> None:
        """Put the chat translation of `request.native` in `request.body`."""

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
