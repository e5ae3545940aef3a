"""`/v1/responses` against other upstreams: a model that calls tools (function_call items,
plain and streamed) and Anthropic-kind deployments, also as a fallback from a full one.
Reuses the upstreams of tests/routing/test_anthropic_e2e.py."""

import json

import openai
import pytest

from tests.e2e.test_anthropic_e2e import (  # noqa: F401 - fixtures
    catalog,
    gpt,
    key,
    tools,
    two_kinds,
)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_a_tool_call_comes_back_as_a_function_call_item(gpt: openai.OpenAI, tools):  # noqa: F811
    response = gpt.responses.create(model="k-tools", input="Weather in Oslo?", tools=[WEATHER])
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1 and response.status == "completed"
    assert (calls[0].call_id, calls[0].name) == ("call_1", "get_weather")
    assert json.loads(calls[0].arguments) == {"city": "Oslo"}
    assert response.usage.input_tokens == 21 and response.usage.output_tokens == 7
    sent = tools.seen[-1]
    assert sent["tools"][0]["function"]["name"] == "get_weather" and "input" not in sent


def test_a_streamed_tool_call_sends_its_argument_deltas(gpt: openai.OpenAI):  # noqa: F811
    events = list(
        gpt.responses.create(
            model="k-tools", input="Weather in Oslo?", tools=[WEATHER], stream=True
        )
    )
    kinds = [e.type for e in events]
    assert kinds.count("response.function_call_arguments.delta") == 2
    done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert json.loads(done.arguments) == {"city": "Oslo"}
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.output[0].type == "function_call"
    assert final.response.output[0].arguments == done.arguments
    assert final.response.usage.total_tokens == 28


@pytest.mark.parametrize(
    ("route", "served", "fell_back"), [("k-claude", "k-claude", False), ("k-mixed", "k-gpt", True)]
)
def test_served_by_an_anthropic_deployment_or_past_a_full_one(
    gpt: openai.OpenAI,  # noqa: F811
    call_record,
    route,
    served,
    fell_back,
):
    raw = gpt.responses.with_raw_response.create(model=route, input="Hello", instructions="Brief.")
    response = raw.parse()
    assert response.status == "completed" and response.output_text
    record = call_record(raw.headers["x-sluice-request-id"])
    assert (record.served_deployment, record.fell_back) == (served, fell_back)
    assert record.client_protocol == "openai-responses"
    assert record.upstream_protocol == ("anthropic" if served == "k-claude" else "openai")
    assert (record.tokens_in, record.tokens_out) == (
        response.usage.input_tokens,
        response.usage.output_tokens,
    )
