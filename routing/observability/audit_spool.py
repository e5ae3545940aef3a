"""The audit trail's hand-off to disk, so a worker killed the next instant loses no row.

Every call the writer records is appended, as one JSON line, to this worker's spool file
before the call's answer ends: copied into the file's pages mapped shared into memory (the
kernel keeps them when the process is killed, `kill -9` or out of memory; a power cut may
lose the last lines, as it loses any unsynced write). A mapped copy, not a `write`: the
system call cost ~12 µs of CPU on a busy host and let go of the GIL, so the event loop
waited for it to come back (~60 µs a call under load). The file's blocks are allocated
when it is opened (`posix_fallocate`), so a full disk fails there, never as a fault on a
later copy; then lines go by `write` again. A file ends at its last complete line: what
follows (zeros never written, or a line cut by the kill) is not read. When the writer takes
a batch it seals the file (later calls go to a new one) and deletes it once the batch is
committed. A worker that finds spool files of a worker no longer alive on this host claims
them (an atomic rename) and writes the calls in them that the database does not hold yet:
nothing twice, nothing lost. The folder is per database (a test database never receives a
demo's rows).
"""

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import mmap
import os
import typing
import uuid
from collections import deque
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger("sluice.audit")

NOT_SPOOLED = {"quota", "started", "trace"}  # a reservation, a timer, a trace: not in the row


def spool_folder(base: Path, database: dict[str, Any]) -> Path:
    """`base`/<one folder per database>: the database's engine, name, host and port."""
    identity = "|".join(str(database.get(k, "")) for k in ("ENGINE", "NAME", "HOST", "PORT"))
    return base / hashlib.sha256(identity.encode()).hexdigest()[:16]


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, Decimal):
        return {"$dec": str(value)}
    raise TypeError(type(value).__name__)


def _decode(value: dict[str, Any]) -> Any:
    if "$dt" in value:
        return datetime.fromisoformat(value["$dt"])
    if "$dec" in value:
        return Decimal(value["$dec"])
    return value


@functools.cache
def _typed(kind: type) -> dict[str, Any]:
    """A dataclass's datetime and Decimal fields, by name: how to read each back from its
    text (orjson writes a datetime as its ISO text; a Decimal goes as its text)."""
    readers: dict[str, Any] = {}
    for f in dataclasses.fields(kind):
        types = {f.type, *typing.get_args(f.type)}
        if datetime in types:
            readers[f.name] = datetime.fromisoformat
        elif Decimal in types:
            readers[f.name] = Decimal
    return readers


def encode_call(call: Any) -> bytes:
    """One line: the call's fields (and its attempts') as JSON, from a copy of the call's
    `__dict__` (neither `dataclasses.asdict`, whose deep copy was a tenth of the worker's
    CPU per call, nor a read field by field), written by orjson without a callback (a
    quarter of json's CPU; datetimes as ISO text, Decimals as text); by json when orjson
    refuses a value (a lone surrogate, which JSON's escapes allow and UTF-8 does not)."""
    fields = vars(call).copy()
    for name in NOT_SPOOLED:
        fields.pop(name, None)
    for name, reader in _typed(type(call)).items():
        if reader is Decimal and isinstance(fields.get(name), Decimal):
            fields[name] = str(fields[name])
    fields["attempts"] = [vars(a) for a in call.attempts]
    try:
        return orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        return json.dumps(fields, default=_encode, separators=(",", ":")).encode() + b"\n"


def _typed_back(fields: dict[str, Any], kind: type) -> dict[str, Any]:
    """The fields a dataclass of `kind` takes, datetimes and Decimals read back."""
    names = {f.name for f in dataclasses.fields(kind)}
    known = {k: v for k, v in fields.items() if k in names}
    for name, reader in _typed(kind).items():
        if isinstance(known.get(name), str):
            known[name] = reader(known[name])
    return known


def decode_call(line: bytes, call_type: type, attempt_type: type) -> Any:
    """A call from its line, also from a line of an older Sluice (its datetimes and
    Decimals wrapped as {"$dt": …} and {"$dec": …})."""
    fields = json.loads(line, object_hook=_decode)
    attempts = [attempt_type(**_typed_back(a, attempt_type)) for a in fields.pop("attempts", [])]
    return call_type(**_typed_back(fields, call_type), attempts=attempts)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclasses.dataclass
class _File:
    """One spool file, open and (unless the disk had no room) mapped."""

    path: Path
    fd: int
    pid: int  # the worker it is named for (a forked child opens its own)
    map: mmap.mmap | None  # None: lines go by write
    used: int = 0  # bytes of lines in the file


class Spool:
    """This worker's spool files in `folder`: `spool-<pid>-<n>.jsonl`, one per batch.

    Only the copy of a line runs on the event loop. Opening, allocating and mapping a file,
    closing and trimming a sealed one, and deleting a written one are system calls that
    wait on the file system (on a host whose database commits to the same disk, for its
    journal): the writer's thread does them (`tidy`, `discard`), and the file that follows
    a sealed one is ready before the loop needs it."""

    SEGMENT = 1 << 20  # bytes mapped at a time; a file grows by as much when full

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._file: _File | None = None
        # Handed between the loop and the writer's thread; a deque's append and popleft
        # are atomic, so neither side waits for the other.
        self._ready: deque[_File] = deque()  # opened ahead by `tidy`, at most one
        self._sealed: deque[_File] = deque()  # sealed on the loop, closed by `tidy`

    def append(self, line: bytes) -> None:
        try:
            file = self._file
            if file is None or file.pid != os.getpid():
                file = self._file = self._next_file()
            end = file.used + len(line)
            if file.map is not None and end > len(file.map):
                self._grow(file, end)
            if file.map is not None:
                # The newline last: a line with its newline in the file is whole, even if
                # the copy before it was cut by the kill (it may store out of order).
                file.map[file.used : end - 1] = memoryview(line)[:-1]
                file.map[end - 1] = line[-1]
            else:
                os.write(file.fd, line)
            file.used = end
        except OSError as exc:  # a full or read-only disk costs the safety net, not the call
            log.error("audit spool write failed (%s); the row is kept in memory only", exc)

    def _next_file(self) -> _File:
        """The file `tidy` opened ahead, or (the first, or after a fork) one opened now."""
        while self._ready:
            file = self._ready.popleft()
            if file.pid == os.getpid():
                return file
        return self._open()

    def _open(self, size: int = SEGMENT) -> _File:
        self.folder.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        path = self.folder / f"spool-{pid}-{uuid.uuid4().hex[:12]}.jsonl"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        file = _File(path, fd, pid, None)
        file.map = self._mapped(file, size)
        return file

    @staticmethod
    def _mapped(file: _File, size: int) -> mmap.mmap | None:
        """The file's first `size` bytes allocated and mapped; None (lines by `write`) when
        the disk has no room for them."""
        try:
            os.posix_fallocate(file.fd, 0, size)
            return mmap.mmap(file.fd, size)
        except OSError as exc:
            log.warning("audit spool not mapped (%s); lines go by write", exc)
            os.ftruncate(file.fd, file.used)
            return None

    def _grow(self, file: _File, end: int) -> None:
        assert file.map is not None
        file.map.close()
        file.map = self._mapped(file, self._segments(end))

    @classmethod
    def _segments(cls, size: int) -> int:
        """`size` bytes rounded up to whole segments, one at least."""
        return max(1, -(-size // cls.SEGMENT)) * cls.SEGMENT

    def seal(self) -> Path | None:
        """End the current file (its calls are about to be written; the next call goes to
        another); its path. The loop only hands it over: `tidy` closes it. None when
        nothing was appended since the last seal."""
        file, self._file = self._file, None
        if file is None:
            return None
        self._sealed.append(file)
        return file.path

    def tidy(self) -> None:
        """On the writer's thread, after a seal: close the sealed files (each ends at its
        last line) and open the next one ahead."""
        if not self._sealed:
            return
        used = 0  # bytes of lines in the files sealed
        while self._sealed:
            file = self._sealed.popleft()
            used += file.used
            try:
                if file.map is not None:
                    file.map.close()
                    os.ftruncate(file.fd, file.used)  # the file ends at its last line
            except OSError as exc:  # the lines are in the file; zeros after them are not read
                log.warning("audit spool not trimmed (%s)", exc)
            os.close(file.fd)
        if not self._ready:
            # Room for twice what the sealed files held: growing a file is a system call
            # (and fresh pages) on the loop.
            try:
                file = self._open(self._segments(2 * used))
            except OSError as exc:  # the loop opens one itself at the next call
                log.warning("audit spool file not opened ahead (%s)", exc)
                return
            if file.map is not None:
                # The first write to a page of a fresh mapping faults, and the file system
                # may make it wait for its journal: the pages the last file filled, and as
                # many again, are written here first (zeros, which a reader skips; what is
                # not used is cut off when the file is sealed).
                for offset in range(0, min(len(file.map), 2 * used + 1), mmap.PAGESIZE):
                    file.map[offset] = 0
            self._ready.append(file)

    def close(self) -> None:
        """The worker stops: remove the file opened ahead (it holds nothing)."""
        while self._ready:
            file = self._ready.popleft()
            if file.map is not None:
                file.map.close()
            os.close(file.fd)
            file.path.unlink(missing_ok=True)

    @staticmethod
    def discard(paths: list[Path]) -> None:
        """The calls in these files are in the database."""
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def claim_orphans(self) -> list[Path]:
        """Spool files of workers of this host that are no longer alive, renamed to this
        worker's (only one claimer wins a rename)."""
        if not self.folder.is_dir():
            return []
        claimed = []
        for path in self.folder.glob("*.jsonl"):
            try:
                pid = int(path.name.split("-")[1])
            except (IndexError, ValueError):
                continue
            if pid == os.getpid() or _alive(pid):
                continue
            target = self.folder / f"spool-{os.getpid()}-{uuid.uuid4().hex[:12]}.jsonl"
            try:
                path.rename(target)
            except FileNotFoundError:
                continue  # another worker claimed it first
            claimed.append(target)
        return claimed

    @staticmethod
    def read(path: Path) -> list[bytes]:
        """The complete lines of a file (a line cut short by the kill, or the zeros after the
        last line of a file still mapped when its worker died, are left out; a JSON line
        holds no NUL byte)."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        return [line for line in data.split(b"\n")[:-1] if line and b"\0" not in line]
