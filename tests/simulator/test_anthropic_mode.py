"""The simulator's Anthropic-shaped models (`--model NAME:CAP:anthropic`): the official
`anthropic` SDK against a real simulator process, plain, streaming, and at capacity (529
`overloaded_error`, by capacity and by the capacity fault). No database."""

from collections.abc import Iterator

import anthropic
import httpx
import pytest

from simulator.config import split_shape
from tests.support import SimulatorHandle, start_simulator

HI = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimulatorHandle]:
    yield from start_simulator(
        "--model", "claude-x:4:anthropic", "--model", "claude-full:0:anthropic",
        "--model", "claude-flaky:4:anthropic", "--model", "gpt-y:4",
        "--fault", "claude-flaky:capacity=1",
    )  # fmt: skip


@pytest.fixture
def client(sim: SimulatorHandle) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.url, api_key="sk-test", max_retries=0)


def test_split_shape():
    assert split_shape("claude-x:4:anthropic") == ("claude-x:4", "anthropic")
    assert split_shape("llama3:8b:4") == ("llama3:8b:4", "openai")


def test_the_sdk_gets_a_message_with_usage(client):
    message = client.messages.create(model="claude-x", max_tokens=3, messages=HI)
    assert message.type == "message"
    assert message.content[0].text == "tok tok tok "
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 3 and message.usage.input_tokens > 0


def test_the_sdk_streams_a_message(client):
    with client.messages.stream(model="claude-x", max_tokens=4, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "tok " * 4
    assert final.usage.output_tokens == 4 and final.stop_reason == "end_turn"


@pytest.mark.parametrize("model", ["claude-full", "claude-flaky"])
def test_at_capacity_is_529_overloaded_error(client, sim, model):
    before = sim.stats(model)["requests"]
    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(model=model, max_tokens=3, messages=HI)
    assert raised.value.status_code == 529
    assert raised.value.body["error"]["type"] == "overloaded_error"
    assert sim.stats(model)["requests"] == before + 1  # counted like any request


def test_an_openai_shaped_model_is_not_served_on_messages(sim):
    response = httpx.post(
        f"{sim.url}/v1/messages", json={"model": "gpt-y", "max_tokens": 1, "messages": HI}
    )
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"
