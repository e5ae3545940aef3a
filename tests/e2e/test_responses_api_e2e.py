"""`POST /v1/responses` as a client meets it: the official `openai` SDK's
`client.responses.create`, plain and streaming, against the gateway under uvicorn and the
simulator, through the same path as chat completions (keys, limits, chain, audit)."""

import httpx
import openai
import pytest
from openai import OpenAI

from tests.support import GatewayHandle


@pytest.fixture
def client(gateway: GatewayHandle, issue_key) -> OpenAI:
    return OpenAI(base_url=f"{gateway.url}/v1", api_key=issue_key().plaintext, max_retries=0)


def test_a_plain_response_through_the_sdk_is_audited_as_the_responses_protocol(client, call_record):
    raw = client.responses.with_raw_response.create(
        model="fast", input="Say hello.", instructions="Be brief.", max_output_tokens=20
    )
    response = raw.parse()
    assert response.object == "response" and response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.output_text  # the message item's text, as the SDK reads it
    assert response.output[0].type == "message" and response.output[0].role == "assistant"
    assert response.instructions == "Be brief." and response.max_output_tokens == 20
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert raw.headers["x-sluice-served-model"] == "small"

    record = call_record(raw.headers["x-sluice-request-id"])
    assert (record.endpoint, record.client_protocol) == ("responses", "openai-responses")
    assert (record.outcome, record.requested_model, record.attempt_count) == ("success", "fast", 1)
    assert (record.tokens_in, record.tokens_out) == (
        response.usage.input_tokens,
        response.usage.output_tokens,
    )


def test_a_streamed_response_sends_the_events_the_sdk_expects(client, call_record):
    stream = client.responses.create(model="fast", input="Count to five.", stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert kinds.count("response.output_text.delta") >= 2
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert text and done.output_text == text == events[-4].text
    assert done.status == "completed" and done.usage.output_tokens > 0
    assert events[0].response.id == done.id and events[0].response.status == "in_progress"


def test_the_sdks_stream_helper_accumulates_the_same_response(client):
    with client.responses.stream(model="fast", input="Name three fruits.") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.output_text == "".join(deltas) and final.usage.input_tokens > 0


def test_function_call_history_and_tools_are_served(client):
    response = client.responses.create(
        model="fast",
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "weather",
                "arguments": '{"city": "Paris"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "18 C, sunny"},
        ],
        tools=[
            {
                "type": "function",
                "name": "weather",
                "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                "strict": False,
            }
        ],
    )
    assert response.status == "completed" and response.output_text
    assert response.tools[0].name == "weather"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"background": True}, "background"),
    ],
)
def test_stored_state_cannot_cross_to_a_chat_deployment_and_is_refused_naming_the_field(
    client, extra, param
):
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="fast", input="Hi", **extra)
    error = info.value.body
    assert info.value.status_code == 400 and error["param"] == param
    assert error["type"] == "invalid_request_error" and param.split("[")[0] in error["message"]


def test_what_chat_cannot_take_is_left_out_and_recorded(client, call_record):
    raw = client.responses.with_raw_response.create(
        model="fast",
        input="Hi",
        store=True,
        tools=[{"type": "web_search"}],
        include=["reasoning.encrypted_content"],
        extra_body={"client_metadata": {"agent": "x"}},
    )
    assert raw.parse().status == "completed"
    degraded = call_record(raw.headers["x-sluice-request-id"]).degraded.splitlines()
    assert [line.split(":")[0] for line in degraded] == [
        "store",
        "include.reasoning.encrypted_content",
        "client_metadata",
        "tools[0]",
    ]
    assert '{"agent": "x"}' in degraded[2]  # kept in the audit, not sent on


def test_errors_keep_openais_shape(gateway, issue_key):
    key = issue_key().plaintext
    url = f"{gateway.url}/v1/responses"
    headers = {"authorization": f"Bearer {key}"}
    missing = httpx.post(url, headers=headers, json={"model": "fast"})
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "input"
    unknown = httpx.post(url, headers=headers, json={"model": "nope", "input": "Hi"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    anonymous = httpx.post(url, json={"model": "fast", "input": "Hi"})
    assert anonymous.status_code == 401
    assert httpx.get(url, headers=headers).status_code == 405
