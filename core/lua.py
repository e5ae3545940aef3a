"""Lua scripts for Redis, kept in `.lua` files beside the backend that runs them.

A script is its files joined (a shared prelude first, say) under a header that defines
the caller's constants (`local NAME = value`), so the numbers the Lua uses come from the
same Python table as the rules written in Python. Scripts are registered once per client
(redis-py sends EVALSHA and loads a script again if the server lost it)."""

import re
from collections.abc import Mapping
from pathlib import Path

import redis.asyncio as redis
from redis.commands.core import AsyncScript

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
    """Named scripts, registered on each client they run on (a client per event loop)."""

    def __init__(self, sources: Mapping[str, str]) -> None:
        self.sources = dict(sources)
        self._registered: dict[int, dict[str, AsyncScript]] = {}

    def on(self, client: redis.Redis) -> dict[str, AsyncScript]:
        scripts = self._registered.get(id(client))
        if scripts is None:
            scripts = self._registered[id(client)] = {
                name: client.register_script(source) for name, source in self.sources.items()
            }
        return scripts
