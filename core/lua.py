"""Lua scripts for Redis, kept in `.lua` files beside the backend that runs them.

A script is its files joined (a shared prelude first, say) under a header that defines
the caller's constants (`local NAME = value`), so the numbers the Lua uses come from the
same Python table as the rules written in Python. They run over this event loop's lean
connection to Redis (core/redis_wire.py: EVALSHA, and EVAL where the server lost it)."""

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.redis_wire import Arg, Script, script_wire

_NAME = re.compile(r"[A-Z][A-Z0-9_]*\Z")


def lua_header(constants: Mapping[str, float | int]) -> str:
    """`local NAME = value` for each constant (names in capitals, values numbers only)."""
    lines = []
    for name, value in constants.items():
        if not _NAME.match(name) or isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"not a Lua constant: {name} = {value!r}")
        lines.append(f"local {name} = {value!r}\n")
    return "".join(lines)


def lua_source(
    directory: Path, names: tuple[str, ...], constants: Mapping[str, float | int]
) -> str:
    """The script made of `directory`/<name>.lua for each name, in order, under the
    constants' header."""
    parts = [(directory / f"{name}.lua").read_text() for name in names]
    return lua_header(constants) + "\n".join(parts)


class Scripts:
    """Named scripts, run on the Redis of a URL."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = dict(sources)
        self._scripts = {name: Script(source) for name, source in self.sources.items()}

    async def run(
        self, url: str, name: str, *, keys: Sequence[Arg] = (), args: Sequence[Arg] = ()
    ) -> Any:
        """The script's reply; redis-py's exceptions (RedisError) when Redis refuses or is
        away."""
        return await script_wire(url).run(self._scripts[name], keys, args)
