"""What reading JSON bodies and watching streams cost the request path, side by side with a
baseline.

    .venv/bin/python bench/parsing.py [--tokens 16] [--rounds 5] [--baseline main]

Every request body is read as JSON on the event loop (core/fast_json.py, through
routing/request_path/payloads.py), and so is every upstream answer read whole; a body passed
through to a deployment of its own protocol then gets the deployment's model name written
into its bytes (routing/request_path/protocols/native.py `with_fields`). Bodies of 1 KB (a
chat call), 16 KB and 120 KB (a coding agent's turn: its system prompt, tool definitions
and the conversation so far), in µs of CPU a body.

Every streamed answer goes through a tap on its way to the client
(routing/request_path/stream_tap.py for an OpenAI chat stream relayed to a chat client,
routing/request_path/protocols/native.py for a Messages or Responses stream passed
through): it learns the model and the usage and counts the deltas. The tap runs on the
event loop, once per read from the upstream. Three streams of `tokens` deltas as their
providers send them (a chat stream asked for its usage, with `"usage":null` on every chunk;
a Messages stream with its ping; a Responses stream with its lifecycle events), each fed
two ways: event by event (an upstream that paces its tokens: a read per event) and in one
read (a fast upstream, or a relay that fell behind: many events in one read).

Printed: µs of CPU per body, per stream and per event, median of `rounds`; with
`--baseline REF` those of git ref REF first (from `git archive`, run in a process of their
own), then this checkout's.
"""

import argparse
import functools
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TEXT = "the quick brown fox "  # a delta of a few tokens, as providers send them


def sse(payload: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(payload, separators=(",", ":")) + "\n\n").encode()


def chat_stream(tokens: int) -> list[bytes]:
    base = {
        "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "object": "chat.completion.chunk",
        "created": 1741570283,
        "model": "gpt-4o-2024-08-06",
        "service_tier": "default",
        "system_fingerprint": "fp_eb9dce56a8",
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return sse({**base, "choices": [choice], "usage": None})

    usage = {"prompt_tokens": 1117, "completion_tokens": tokens, "total_tokens": 1117 + tokens}
    return [
        chunk({"role": "assistant", "content": "", "refusal": None}),
        *[chunk({"content": TEXT}) for _ in range(tokens)],
        chunk({}, "stop"),
        sse({**base, "choices": [], "usage": usage}),
        b"data: [DONE]\n\n",
    ]


def messages_stream(tokens: int) -> list[bytes]:
    message = {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-sonnet-4-5-20250929",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1117, "output_tokens": 1},
    }
    block = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": TEXT},
    }
    end = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"output_tokens": tokens},
    }
    return [
        sse({"type": "message_start", "message": message}, "message_start"),
        sse(block, "content_block_start"),
        sse({"type": "ping"}, "ping"),
        *[sse(delta, "content_block_delta") for _ in range(tokens)],
        sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
        sse(end, "message_delta"),
        sse({"type": "message_stop"}, "message_stop"),
    ]


def responses_stream(tokens: int) -> list[bytes]:
    response = {
        "id": "resp_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654",
        "object": "response",
        "created_at": 1741290958,
        "status": "in_progress",
        "model": "gpt-4.1-2025-04-14",
        "output": [],
        "usage": None,
    }
    item = {"id": "msg_67c9fdcf37fc8190ba82116e33fb28c507b8b0ad4e5eb654", "type": "message"}
    done = {
        **response,
        "status": "completed",
        "usage": {"input_tokens": 1117, "output_tokens": tokens, "total_tokens": 1117 + tokens},
    }
    delta = {"type": "response.output_text.delta", "item_id": item["id"], "output_index": 0,
             "content_index": 0, "delta": TEXT}  # fmt: skip

    def event(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, **fields}, kind)

    return [
        event("response.created", response=response),
        event("response.in_progress", response=response),
        event("response.output_item.added", output_index=0, item=item),
        event("response.content_part.added", item_id=item["id"], output_index=0),
        *[sse(delta, "response.output_text.delta") for _ in range(tokens)],
        event("response.output_text.done", item_id=item["id"], text=TEXT * tokens),
        event("response.content_part.done", item_id=item["id"], output_index=0),
        event("response.output_item.done", output_index=0, item=item),
        event("response.completed", response=done),
    ]


def agent_body(size: int) -> bytes:
    """A Messages body of about `size` bytes, as a coding agent sends one: its model first,
    tools with JSON schemas (one with a `model` property, as Claude Code's and Codex's
    sub-agent tools have), then turns of text, tool calls and their results (code, with
    numbers in it)."""
    agent = {"type": "object", "properties": {"model": {"type": "string", "enum": ["a", "b"]}}}
    tools = [{"name": "agent", "description": "Starts a sub-agent.", "input_schema": agent}] + [
        {
            "name": f"tool_{i}",
            "description": "Reads a file of the workspace and returns its lines. " * 3,
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}},
                "required": ["path"],
            },
        }
        for i in range(8)
    ]
    code = "def handler(event):\n    return {'status': 200, 'count': 12345}\n" * 6
    turns: list[dict[str, Any]] = []
    body = {"model": "m", "max_tokens": 4096, "stream": True, "tools": tools, "messages": turns}
    while len(json.dumps(body)) < size:
        turns.append({"role": "user", "content": [{"type": "text", "text": "Fix the tests. " * 8}]})
        turns.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{len(turns)}", "name": "tool_0",
             "input": {"path": "src/app.py", "offset": 120}},
        ]})  # fmt: skip
        turns.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{len(turns)}", "content": code},
        ]})  # fmt: skip
    return json.dumps(body).encode()


def chat_body(size: int) -> bytes:
    """The same conversation as a chat completions body of about `size` bytes."""
    code = "def handler(event):\n    return {'status': 200, 'count': 12345}\n" * 6
    turns: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent in the user's workspace. " * 40}
    ]
    body = {"model": "m", "max_tokens": 4096, "messages": turns}
    while len(json.dumps(body)) < size:
        turns.append({"role": "user", "content": "Fix the tests. " * 8})
        turns.append({"role": "assistant", "content": f"Here is the change:\n{code}"})
    return json.dumps(body).encode()


BODIES = {"1 KB": 1_000, "16 KB": 16_000, "120 KB": 120_000}


def median_us(run: Callable[[], object], count: int, rounds: int) -> float:
    """µs of CPU a run takes: the median of `rounds` rounds of `count` runs."""
    times = []
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(count):
            run()
        times.append((time.process_time() - started) / count * 1e6)
    return statistics.median(times)


def relay(new_tap: Callable[[], Any], reads: list[bytes]) -> Any:
    """A new tap, fed the stream's reads to the end."""
    tap = new_tap()
    for read in reads:
        tap.feed(read)
    tap.flush()
    return tap


def measure_bodies(rounds: int) -> dict[str, float]:
    from core import fast_json
    from routing.request_path.protocols.native import with_fields

    # The model as the request path read it, where this checkout's with_fields takes it.
    read = ({"model": "m"},) if "read" in inspect.signature(with_fields).parameters else ()

    figures = {}
    for name, size in BODIES.items():
        body = agent_body(size)
        if fast_json.loads(body) != json.loads(body):
            raise SystemExit(f"{name}: read differently from json: not measured")
        if json.loads(with_fields(body, {"model": "up"}, *read)) != {
            **json.loads(body),
            "model": "up",
        }:
            raise SystemExit(f"{name}: the model was not set: not measured")
        for step, run in (
            ("read", lambda body=body: fast_json.loads(body)),
            ("model set", lambda body=body: with_fields(body, {"model": "up"}, *read)),
        ):
            figures[f"{name}, {step}"] = median_us(run, max(20, 4_000_000 // len(body)), rounds)
    return figures


def taps() -> dict[str, Callable[[], Any]]:
    from routing.request_path.protocols.native import NativeTap
    from routing.request_path.stream_tap import StreamTap

    return {
        "chat (StreamTap)": lambda: StreamTap(forward_usage=False),
        "Messages (NativeTap)": lambda: NativeTap("anthropic"),
        "Responses (NativeTap)": lambda: NativeTap("openai-responses"),
    }


STREAMS = {
    "chat (StreamTap)": chat_stream,
    "Messages (NativeTap)": messages_stream,
    "Responses (NativeTap)": responses_stream,
}


def measure(tokens: int, rounds: int) -> dict[str, dict[str, float]]:
    """µs per body read, and per stream per tap and feeding; in this process, from this
    process's sys.path."""
    made = taps()
    figures: dict[str, dict[str, float]] = {"bodies": measure_bodies(rounds)}
    for name, new_tap in made.items():
        events = STREAMS[name](tokens)
        whole = b"".join(events)
        for feeding, reads in (("event by event", events), ("one read", [whole])):
            tap = relay(new_tap, reads)
            if tap.usage is None or not tap.model:
                raise SystemExit(f"{name}: the tap learned no usage or model: not measured")
            run = functools.partial(relay, new_tap, reads)
            figures.setdefault(name, {})[feeding] = median_us(run, 2000, rounds)
    return figures


def measured_at(source: Path, tokens: int, rounds: int) -> dict[str, dict[str, float]]:
    """The figures of the taps in `source` (a checkout), from a process of their own."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--tokens", str(tokens), "--rounds",
         str(rounds), "--json"],
        cwd=source, env={**os.environ, "PYTHONPATH": str(source)}, check=True,
        capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", help="git ref to compare this checkout with")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.json:
        sys.path.insert(0, os.getcwd())
        print(json.dumps(measure(args.tokens, args.rounds)))
        return
    sides: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        if args.baseline:
            archive = subprocess.run(
                ["git", "archive", args.baseline], cwd=ROOT, check=True, capture_output=True
            ).stdout
            subprocess.run(["tar", "-x", "-C", scratch], input=archive, check=True)
            sides[args.baseline] = measured_at(Path(scratch), args.tokens, args.rounds)
        sides["this checkout"] = measured_at(ROOT, args.tokens, args.rounds)
    print(f"Request bodies: µs of CPU a body, median of {args.rounds} rounds")
    print(f"  {'body':40}" + "".join(f"{side:>26}" for side in sides))
    for name in next(iter(sides.values()))["bodies"]:
        cells = "".join(f"{figures['bodies'][name]:26.1f}" for figures in sides.values())
        print(f"  {name:40}{cells}")
    print(f"\nStream taps: µs of CPU per stream of {args.tokens} deltas (per event), median of "
          f"{args.rounds} rounds")  # fmt: skip
    print(f"  {'stream':24}{'fed':16}" + "".join(f"{side:>26}" for side in sides))
    for name, stream in STREAMS.items():
        count = len(stream(args.tokens))
        for feeding in ("event by event", "one read"):
            cells = "".join(
                f"{figures[name][feeding]:14.1f} ({figures[name][feeding] / count:5.2f}/ev)"
                for figures in sides.values()
            )
            print(f"  {name:24}{feeding:16}{cells}")


if __name__ == "__main__":
    main()
