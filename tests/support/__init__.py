"""Helpers the tests share (the fixtures stay in the conftest files): subprocesses, the
simulator and the gateway, polling, the end-to-end scenario.

The helpers that need Django's models or the openai SDK are imported from their modules:
`tests.support.api` (the management API's world and error shape) and `tests.support.batches`
(Batch API input files)."""

from tests.support.gateway import GatewayHandle, child_database_url, start_gateway
from tests.support.keys import IssuedKey
from tests.support.processes import ROOT, free_port, start_process, stop_process
from tests.support.scenario import (
    FAULTS,
    FAULTY_MODELS,
    SCENARIO,
    e2e_config,
    faulty_simulator_args,
)
from tests.support.simulator import SimulatorHandle, start_simulator
from tests.support.waiting import wait_until, wait_until_served

__all__ = [
    "FAULTS",
    "FAULTY_MODELS",
    "ROOT",
    "SCENARIO",
    "GatewayHandle",
    "IssuedKey",
    "SimulatorHandle",
    "child_database_url",
    "e2e_config",
    "faulty_simulator_args",
    "free_port",
    "start_gateway",
    "start_process",
    "start_simulator",
    "stop_process",
    "wait_until",
    "wait_until_served",
]
