"""The OpenAI Agents SDK (the `agents` package) through Sluice: an agent with a function tool,
on its Responses model (native on an `openai-responses` deployment, crossing kinds on a chat
one) and on its chat-completions model, plain and streamed, past an at-capacity primary,
and the clear error it raises when the whole chain is full. Uses the routes and the
simulator of tests/e2e/test_agents_e2e.py (the simulator answers `run: COMMAND` with a call
of the shell tool the agent offers, then quotes the tool's result)."""

import asyncio
from typing import Any

import openai
import pytest
from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)

from tests.e2e.test_agents_e2e import (  # noqa: F401 - fixtures
    agent_catalog,
    agent_key,
    agent_sim,
    audit,
)
from tests.support import wait_until

# Traces would go to api.openai.com; the gateway's audit is the record here.
set_tracing_disabled(True)

ran: list[str] = []


@function_tool
def shell(command: str) -> str:
    """Run a shell command and return what it printed."""
    ran.append(command)
    return f"printed {command.removeprefix('echo ').strip()}"


def _agent(gateway: Any, key: str, route: str, api: str) -> Agent:
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    model = (
        OpenAIResponsesModel(model=route, openai_client=client)
        if api == "responses"
        else OpenAIChatCompletionsModel(model=route, openai_client=client)
    )
    return Agent(name="helper", instructions="Be brief.", model=model, tools=[shell])


def _streamed(agent: Agent, prompt: str) -> tuple[str, list[str]]:
    async def run() -> tuple[str, list[str]]:
        result = Runner.run_streamed(agent, prompt)
        kinds = [event.type async for event in result.stream_events()]
        return str(result.final_output), kinds

    return asyncio.run(run())


# The SDK's model, the route, the protocol Sluice speaks upstream
CASES = [
    pytest.param("responses", "ag-resp", "openai-responses", id="responses-native"),
    pytest.param("responses", "ag-chat", "openai", id="responses-crossing"),
    pytest.param("chat", "ag-chat", "openai", id="chat"),
]


@pytest.mark.parametrize(("api", "route", "upstream"), CASES)
def test_an_agent_runs_a_tool_and_answers(gateway, agent_key, audit, api, route, upstream):  # noqa: F811
    before = audit()
    ran.clear()
    result = Runner.run_sync(_agent(gateway, agent_key, route, api), "run: echo sluice-42")
    assert ran == ["echo sluice-42"]
    assert "tool said:" in result.final_output and "printed sluice-42" in result.final_output
    from routing.models import CallRecord

    def written() -> list[Any]:
        calls = CallRecord.objects.filter(requested_model=route).exclude(request_id__in=before)
        # The agent_key fixture's own readiness call is httpx's ("python-httpx/…").
        calls = calls.exclude(user_agent__startswith="python")
        return list(calls) if len(calls) >= 2 else []

    calls = wait_until(written, timeout=10)
    assert len(calls) == 2  # the turn that asked for the tool, the turn that answered
    assert {c.upstream_protocol for c in calls} == {upstream}
    assert all(c.outcome == "success" and c.user_agent.startswith("Agents/Python") for c in calls)


@pytest.mark.parametrize(("api", "route", "upstream"), CASES)
def test_a_streamed_run(gateway, agent_key, api, route, upstream):  # noqa: F811
    output, kinds = _streamed(_agent(gateway, agent_key, route, api), "say hello")
    assert "tok tok" in output
    assert "raw_response_event" in kinds


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_a_run_falls_back_past_an_at_capacity_primary(gateway, agent_key, api):  # noqa: F811
    route = "ag-resp-fallback" if api == "responses" else "ag-chat-fallback"
    result = Runner.run_sync(_agent(gateway, agent_key, route, api), "say hello")
    assert "tok tok" in result.final_output


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_the_whole_chain_full_raises_a_clear_error(gateway, agent_key, api):  # noqa: F811
    with pytest.raises(openai.APIStatusError) as raised:
        Runner.run_sync(_agent(gateway, agent_key, "ag-full", api), "say hello")
    assert raised.value.status_code == 503
    assert "Every deployment for `ag-full` is at capacity" in str(raised.value)
    assert 0 < int(raised.value.response.headers["retry-after"]) <= 60
