"""The real coding agents through Sluice: `codex exec` (OpenAI's Codex CLI, Responses API)
and `claude -p` (Claude Code, Messages API), the npm releases pinned in
tests/e2e/agents/install.sh, installed into .agents/ when missing (skipped, with the
reason, when npm or its registry is not reachable).

Each runs natively (Codex on an `openai-responses` deployment, Claude Code on an
`anthropic` one) and crossing kinds (both on a chat deployment), against the simulator,
which answers `run: COMMAND` with a call of the agent's shell tool and a tool's result with
`tool said: …` or `tool failed: …`: a plain call, a tool turn, a failing tool turn, a
fallback from an at-capacity primary, and a whole chain at capacity (the agent prints the
clear 503 and exits, after honouring the Retry-After once)."""

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    ROOT,
    GatewayHandle,
    SimulatorHandle,
    start_simulator,
    wait_until,
    wait_until_served,
)

AGENTS = ROOT / ".agents" / "node_modules" / ".bin"
INSTALL = ROOT / "tests" / "e2e" / "agents" / "install.sh"


def _installed() -> str | None:
    """Why the agents cannot run, or None once both are there."""
    if os.environ.get("SLUICE_SKIP_AGENT_TESTS") == "1":
        return "SLUICE_SKIP_AGENT_TESTS=1 (CI runs them in its first database pass)"
    if (AGENTS / "codex").exists() and (AGENTS / "claude").exists():
        return None
    if shutil.which("npm") is None:
        return "npm is not installed"
    try:
        done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "installing the agents from npm took over 10 minutes"
    if done.returncode != 0:
        return "npm could not install the agents: " + (done.stderr or done.stdout)[-300:]
    return None


@pytest.fixture(scope="module")
def agents() -> None:
    why = _installed()
    if why is not None:
        print(f"skipping the coding-agent tests: {why}")
        pytest.skip(why)


@pytest.fixture(scope="module")
def agent_sim() -> Iterator[SimulatorHandle]:
    yield from start_simulator(
        "--model", "chat:8", "--model", "chat-full:0",
        "--model", "claude:8:anthropic", "--model", "claude-full:0:anthropic",
        "--model", "resp:8:openai-responses", "--model", "resp-full:0:openai-responses",
    )  # fmt: skip


ROUTES = {
    "ag-claude": ["a-claude"],
    "ag-resp": ["a-resp"],
    "ag-chat": ["a-chat"],
    "ag-claude-fallback": ["a-claude-full", "a-claude"],
    "ag-resp-fallback": ["a-resp-full", "a-resp"],
    "ag-chat-fallback": ["a-chat-full", "a-chat"],
    "ag-full": ["a-claude-full", "a-resp-full", "a-chat-full"],
}


@pytest.fixture(scope="module")
def agent_catalog(e2e_database: str, agent_sim: SimulatorHandle, django_db_blocker: Any) -> None:
    from routing.catalog.config_file import apply_config, validate_config

    sim = f"{agent_sim.url}/v1"
    full = {"breaker_threshold": 0}
    config = {
        "upstreams": [
            {"name": "ag-chat", "base_url": sim},
            {"name": "ag-anthropic", "kind": "anthropic", "base_url": sim},
            {"name": "ag-responses", "kind": "openai-responses", "base_url": sim},
        ],
        "deployments": [
            {"name": "a-chat", "upstream": "ag-chat", "model": "chat"},
            {"name": "a-chat-full", "upstream": "ag-chat", "model": "chat-full", **full},
            {"name": "a-claude", "upstream": "ag-anthropic", "model": "claude"},
            {"name": "a-claude-full", "upstream": "ag-anthropic", "model": "claude-full", **full},
            {"name": "a-resp", "upstream": "ag-responses", "model": "resp"},
            {"name": "a-resp-full", "upstream": "ag-responses", "model": "resp-full", **full},
        ],
        "routes": [
            {"name": name, "chain": chain, "timeout_seconds": 20} for name, chain in ROUTES.items()
        ],
        "applications": [{"slug": "agents", "team": "demo", "routes": list(ROUTES)}],
    }
    with django_db_blocker.unblock():
        apply_config(validate_config(config))


@pytest.fixture
def agent_key(gateway: GatewayHandle, agent_catalog: None, issue_key: Any) -> str:
    plaintext = issue_key(application="agents").plaintext
    wait_until_served(gateway.url, plaintext, "ag-chat", [{"role": "user", "content": "hi"}])
    return plaintext


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TERM") if k in os.environ}
    return keep | {"HOME": str(home), **extra}


def claude(gateway: GatewayHandle, key: str, route: str, prompt: str, tmp: Path) -> Any:
    env = _env(
        tmp,
        ANTHROPIC_BASE_URL=gateway.url,
        ANTHROPIC_API_KEY=key,
        ANTHROPIC_MODEL=route,
        ANTHROPIC_DEFAULT_HAIKU_MODEL=route,
        CLAUDE_CODE_MAX_RETRIES="1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
    )
    command = [str(AGENTS / "claude"), "-p", "--allowedTools", "Bash", "--", prompt]
    return subprocess.run(
        command,
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


CODEX_CONFIG = """model_provider = "sluice"

[model_providers.sluice]
name = "Sluice"
base_url = "{url}/v1"
env_key = "SLUICE_API_KEY"
wire_api = "responses"
request_max_retries = 1
stream_max_retries = 1
"""


def codex(gateway: GatewayHandle, key: str, route: str, prompt: str, tmp: Path) -> Any:
    home = tmp / "codex-home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(CODEX_CONFIG.format(url=gateway.url))
    env = _env(tmp, CODEX_HOME=str(home), SLUICE_API_KEY=key)
    command = [
        str(AGENTS / "codex"), "exec", "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox", "-m", route, "--", prompt,
    ]  # fmt: skip
    return subprocess.run(
        command,
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


# agent, its runner, the route it speaks natively, its protocol
AGENT_ROUTES = {
    "claude": (claude, "ag-claude", "anthropic", "claude-cli/"),
    "codex": (codex, "ag-resp", "openai-responses", "codex_exec/"),
}
CASES = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name in AGENT_ROUTES
    for kind in ("native", "crossing")
]


def _route(name: str, kind: str, suffix: str = "") -> str:
    return (AGENT_ROUTES[name][1] if kind == "native" else "ag-chat") + suffix


def _calls(since_ids: set[str], route: str) -> list[Any]:
    """The agent's calls to the route since then (by their user agent: the test's own
    readiness call is written to the audit in the same batch)."""
    from routing.models import CallRecord

    calls = CallRecord.objects.filter(requested_model=route).exclude(
        user_agent__startswith="python"
    )
    return [c for c in calls if c.request_id not in since_ids]


@pytest.fixture
def audit(committed_db: None) -> Any:
    from routing.models import CallRecord

    def seen() -> set[str]:
        return set(CallRecord.objects.values_list("request_id", flat=True))

    return seen


def _wait_calls(audit_before: set[str], route: str) -> list[Any]:
    return wait_until(lambda: _calls(audit_before, route), timeout=10)


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_a_plain_streamed_call(agents, gateway, agent_key, name, kind, tmp_path, audit):
    run, _, protocol, agent = AGENT_ROUTES[name]
    before = audit()
    done = run(gateway, agent_key, _route(name, kind), "say hello", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tok tok" in done.stdout
    calls = _wait_calls(before, _route(name, kind))
    assert all(c.outcome == "success" and c.stream for c in calls)
    assert {c.client_protocol for c in calls} == {protocol}
    assert {c.upstream_protocol for c in calls} == {protocol if kind == "native" else "openai"}
    assert all(c.user_agent.startswith(agent) for c in calls)
    if kind == "native":
        assert all(c.degraded == "" for c in calls)  # passed through untouched
    else:
        assert any(c.degraded for c in calls)  # e.g. thinking, client_metadata


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_a_tool_turn(agents, gateway, agent_key, name, kind, tmp_path):
    run = AGENT_ROUTES[name][0]
    done = run(gateway, agent_key, _route(name, kind), "run: echo sluice-$((6*7))", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tool said:" in done.stdout and "sluice-42" in done.stdout


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_a_failing_tool_turn_goes_on(agents, gateway, agent_key, name, kind, tmp_path):
    run = AGENT_ROUTES[name][0]
    done = run(gateway, agent_key, _route(name, kind), "run: ls /no-such-dir-42", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tool failed:" in done.stdout and "no-such-dir-42" in done.stdout


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_fallback_from_an_at_capacity_primary(
    agents, gateway, agent_key, name, kind, tmp_path, audit
):
    run = AGENT_ROUTES[name][0]
    route = _route(name, kind, "-fallback")
    before = audit()
    done = run(gateway, agent_key, route, "say hello", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "tok tok" in done.stdout
    calls = _wait_calls(before, route)
    assert calls and all(c.fell_back and c.outcome == "success" for c in calls)


@pytest.mark.parametrize("name", list(AGENT_ROUTES))
def test_the_whole_chain_full_is_a_clear_error(agents, gateway, agent_key, name, tmp_path):
    run = AGENT_ROUTES[name][0]
    done = run(gateway, agent_key, "ag-full", "say hello", tmp_path)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "503" in output and "Every deployment for `ag-full` is at capacity" in output
