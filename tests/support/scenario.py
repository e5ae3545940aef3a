"""The end-to-end scenario: tests/e2e_scenario.toml (the config-file format) and the faulty
simulator's models, one per upstream failure class."""

import tomllib
from typing import Any

from tests.support.processes import ROOT
from tests.support.simulator import SimulatorHandle

SCENARIO = ROOT / "tests" / "e2e_scenario.toml"

FAULTY_MODELS = [
    "srv",
    "rl",
    "rlbare",
    "ctx",
    "auth",
    "nf",
    "hang",
    "reset",
    "garbage",
    "cut",
    "brk",
    "shared",
    "drn",
    "ok",
    "ok2",
    "t1",
    "t2",
    "t3",
]
FAULTS = {
    "srv": "server_error",
    "rl": "rate_limit=1:0.2",
    "rlbare": "rate_limit_bare",
    "ctx": "context_length",
    "auth": "auth",
    "nf": "not_found",
    "hang": "hang",
    "reset": "reset",
    "garbage": "garbage",
    "cut": "stream_cut",
    "t1": "capacity",
}


def faulty_simulator_args() -> list[str]:
    """The faulty simulator's command line: every model of FAULTY_MODELS, 16 in flight, with
    its fault of FAULTS (always, unless the spec gives a rate)."""
    args = [arg for m in FAULTY_MODELS for arg in ("--model", f"{m}:16")]
    for model, fault in FAULTS.items():
        spec = fault if "=" in fault else f"{fault}=1"
        args += ["--fault", f"{model}:{spec}"]
    return args


def e2e_config(
    simulator: SimulatorHandle, slow: SimulatorHandle, faulty: SimulatorHandle
) -> dict[str, Any]:
    """tests/e2e_scenario.toml (the config-file format), its upstreams pointed at the test
    simulators."""
    raw = tomllib.loads(SCENARIO.read_text())
    urls = {"simulator": simulator.url, "slow-sim": slow.url, "faulty": faulty.url}
    for upstream in raw["upstreams"]:
        upstream["base_url"] = f"{urls[upstream['name']]}/v1"
    return raw
