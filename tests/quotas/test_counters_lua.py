"""The quota reservation script reads each check's arguments with the stride the Python side
packs them with, both from one constant."""

import re
from pathlib import Path

import quotas.counters.redis as backend
from core.lua import lua_header
from quotas.counters import Check


def test_reserve_packs_each_check_with_the_stride_the_lua_reads():
    check = Check("k", limit=10, amount=1, ttl=60, lease=True, seed=0, skip_parked=True)
    assert len(backend._check_args(check)) == backend.ARGS_PER_CHECK
    lua = (Path(backend.__file__).parent / "reserve.lua").read_text()
    code = re.sub(r"--[^\n]*", "", lua)
    assert "ARGS_PER_CHECK" in code
    assert not re.search(r"\*\s*6\b", code)  # the stride is not spelled out in the Lua


def test_every_quota_script_starts_with_the_table():
    header = lua_header(backend.LUA_CONSTANTS)
    assert set(backend.SCRIPTS.sources) == {"reserve", "settle", "pending_workers", "take_back"}
    for name, source in backend.SCRIPTS.sources.items():
        assert source.startswith(header), name
