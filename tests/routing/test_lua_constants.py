"""The Redis backend's Lua does the rules' sums with the constants of one Python table
(routing/deployment_state/rules.py): a number written into the Lua, or a name the table
does not define, would let the two backends drift apart."""

import re
from pathlib import Path

import pytest

import routing.deployment_state as package
from core.lua import lua_header
from routing.deployment_state import rules
from routing.deployment_state.redis import SCRIPTS
from routing.deployment_state.slot_policy import DEFAULT_HOLD, MIN_HOLD, RESERVE_EPSILON

LUA_FILES = sorted(Path(package.__file__).parent.glob("*.lua"))
# Numbers the Lua may spell itself: counts, indexes (7: a script's first own ARGV),
# rounding; not rules.
PLAIN_NUMBERS = {"0", "1", "2", "7", "0.5"}


def _code(path: Path) -> str:
    """The Lua without comments, quoted strings and table indexes."""
    code = re.sub(r"--[^\n]*", "", path.read_text())
    code = re.sub(r"'[^'\n]*'", "''", code)
    return re.sub(r"\[\d+\]", "[]", code)


def test_the_lua_files_are_found():
    assert {p.stem for p in LUA_FILES} == {
        "prelude",
        "acquire",
        "release",
        "leave",
        "sweep",
        "snapshot",
    }


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_the_lua_spells_no_number_of_a_rule(path):
    numbers = set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?:e-?\d+)?", _code(path)))
    assert numbers <= PLAIN_NUMBERS, f"{path.name}: put {numbers - PLAIN_NUMBERS} in LUA_CONSTANTS"


def test_every_constant_the_lua_uses_comes_from_the_table():
    code = "\n".join(_code(p) for p in LUA_FILES)
    defined_in_lua = set(re.findall(r"\b(K_[A-Z_]+)\b", code)) | {"KEYS", "ARGV"}
    used = set(re.findall(r"\b([A-Z][A-Z0-9_]{2,})\b", code)) - defined_in_lua
    assert used == set(rules.LUA_CONSTANTS)


def test_the_table_holds_the_rules_own_values():
    assert rules.LUA_CONSTANTS == {
        "FLOOR": rules.FLOOR,
        "CUT": rules.CUT,
        "BUDGET_WIDTH": rules.BUDGET_BUCKET,
        "BUDGET_BUCKETS": rules.BUDGET_BUCKETS,
        "HOLD_WEIGHT": rules.HOLD_WEIGHT,
        "DEFAULT_HOLD": DEFAULT_HOLD,
        "STATE_TTL": rules.STATE_TTL,
        "KEEP_EVERY": rules.KEEP_EVERY,
        "SILENCE": rules.WAITER_SILENCE,
        "RESERVE_EPSILON": RESERVE_EPSILON,
        "MIN_HOLD": MIN_HOLD,
        "LATENCY_WEIGHT": rules.LATENCY_WEIGHT,
        "DEVIATION_WEIGHT": rules.DEVIATION_WEIGHT,
        "NEED_DEVIATIONS": rules.NEED_DEVIATIONS,
        "HANG_FACTOR": rules.HANG_FACTOR,
        "FIRST_OPEN": rules.FIRST_OPEN,
        "DOUBLINGS": rules.DOUBLINGS,
        "SERVICE_HALF_LIFE": rules.SERVICE_HALF_LIFE,
        "FAIR_HEADROOM": rules.FAIR_HEADROOM,
        "LOUD_FACTOR": rules.LOUD_FACTOR,
        "HEADROOM_SHARE": rules.HEADROOM_SHARE,
        "HEADROOM_FROM": rules.HEADROOM_FROM,
        "ACTIVE_WITHIN": rules.ACTIVE_WITHIN,
    }


def test_every_script_starts_with_the_table():
    header = lua_header(rules.LUA_CONSTANTS)
    assert "local CUT = 0.7\n" in header
    for name, source in SCRIPTS.sources.items():
        assert source.startswith(header), name


def test_the_loader_refuses_what_is_not_a_number_constant():
    with pytest.raises(ValueError):
        lua_header({"CUT": "0.7; redis.call('FLUSHALL')"})
    with pytest.raises(ValueError):
        lua_header({"cut": 0.7})
