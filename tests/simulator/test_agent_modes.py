"""The simulator's faces for coding agents: Responses-shaped models
(`--model NAME:CAP:openai-responses`, the official `openai` SDK's `responses`), tool calls
on request (`run: COMMAND`) and tool results quoted back in all three shapes, and Anthropic
thinking blocks when thinking is asked for. A real simulator process; no database."""

import json
from collections.abc import Iterator

import anthropic
import openai
import pytest

from simulator.config import split_shape
from simulator.script import ToolCall, chat_turn, messages_turn, responses_turn
from tests.support import SimulatorHandle, start_simulator

BASH = {"type": "object", "properties": {"command": {"type": "string"}}}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    yield from start_simulator(
        "--model", "gpt-r:4:openai-responses", "--model", "gpt-r-full:0:openai-responses",
        "--model", "claude-x:4:anthropic", "--model", "gpt-c:4",
    )  # fmt: skip


def test_the_shape_is_read_from_the_model_spec():
    assert split_shape("gpt-r:4:openai-responses") == ("gpt-r:4", "openai-responses")


def test_the_responses_sdk_gets_a_response_plain_and_streamed(sim):
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="sk-test", max_retries=0)
    response = client.responses.create(model="gpt-r", input="hello", max_output_tokens=3)
    assert response.output_text == "tok tok tok " and response.usage.output_tokens == 3
    events = list(client.responses.create(model="gpt-r", input="hello", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert events[-1].response.usage.input_tokens > 0
    with pytest.raises(openai.APIStatusError) as full:
        client.responses.create(model="gpt-r-full", input="hello")
    assert full.value.status_code == 503
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="gpt-c", input="hello")  # chat only


def test_a_run_prompt_calls_the_offered_shell_tool_in_every_shape(sim):
    client = openai.OpenAI(base_url=f"{sim.url}/v1", api_key="sk-test", max_retries=0)
    chat = client.chat.completions.create(
        model="gpt-c",
        messages=[{"role": "user", "content": "please run: echo hi"}],
        tools=[{"type": "function", "function": {"name": "Bash", "parameters": BASH}}],
    )
    call = chat.choices[0].message.tool_calls[0]
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "Bash",
        {"command": "echo hi"},
    )
    assert chat.choices[0].finish_reason == "tool_calls"
    claude = anthropic.Anthropic(base_url=sim.url, api_key="sk-test", max_retries=0)
    with claude.messages.stream(
        model="claude-x",
        max_tokens=100,
        thinking={"type": "enabled", "budget_tokens": 1024},
        tools=[{"name": "Bash", "input_schema": BASH}],
        messages=[{"role": "user", "content": "run: ls"}],
    ) as stream:
        message = stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[0].signature and message.stop_reason == "tool_use"
    assert message.content[1].input == {"command": "ls"}


def test_no_thinking_block_unless_asked():
    # A plain Messages answer (the anthropic-mode tests) keeps its single text block; the
    # scripted turn of a tool result answers with text quoting it.
    assert messages_turn({"messages": [{"role": "user", "content": "hi"}]}) is None


@pytest.mark.parametrize(
    ("turn", "text"),
    [
        (
            chat_turn({"messages": [{"role": "tool", "tool_call_id": "c", "content": "42"}]}),
            "tool said: 42",
        ),
        (
            messages_turn(
                {
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {
                                    "type": "tool_result",
                                    "tool_use_id": "t",
                                    "content": "boom",
                                    "is_error": True,
                                }
                            ],
                        },
                        {"role": "system", "content": "a reminder after the turn"},
                    ]
                }
            ),
            "tool failed: boom",
        ),
        (
            responses_turn(
                {
                    "input": [
                        {
                            "type": "function_call_output",
                            "call_id": "c",
                            "output": "Process exited with code 2",
                        }
                    ]
                }
            ),
            "tool failed: Process exited with code 2",
        ),
    ],
)
def test_a_tool_result_is_quoted_back_and_a_failure_named(turn, text):
    assert turn.text == text


def test_the_shell_tool_arguments_follow_its_schema():
    tools = [
        {"type": "function", "name": "view_image", "parameters": {}},
        {
            "type": "function",
            "name": "shell",
            "parameters": {"type": "object", "properties": {"command": {"type": "array"}}},
        },
    ]
    turn = responses_turn({"input": "run: pwd", "tools": tools})
    assert turn == ToolCall("shell", json.dumps({"command": ["bash", "-lc", "pwd"]}))
    assert responses_turn({"input": "run: pwd"}) is None  # no tool offered: plain text
