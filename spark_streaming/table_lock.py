"""One writing process per streaming table, enforced with a lock file per table.

A silver query keeps its progress in a checkpoint and state of its own. A second process
writing the same table (another `lakehouse silver`, or `--rebuild` deleting the
checkpoint and emptying the table under a running query) would commit batches the first
knows nothing about. Every process that runs a table's query or rebuild holds the table's
lock for as long as it does; another process is refused, told who holds it. The locks are
`flock`s on files under `<state>/locks/`: the kernel releases them when the process
ends, so a crash leaves no stale lock. They bind processes on one machine (the embedded
profile and a driver host); within a process they are re-entrant.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from settings import Settings


class TableBusy(Exception):
    """Refused as unsafe: another process is writing the table."""


_guard = threading.Lock()
_held: dict[Path, list[int]] = {}  # lock file -> [fd, depth], this process


def _lock_file(settings: Settings, table: str) -> Path:
    return settings.state_path / "locks" / f"{table}.lock"


def _acquire(path: Path, purpose: str, refusal: Callable[[str], str]) -> None:
    """Lock `path` for this process; `refusal(holder)` is the error text when taken."""
    with _guard:
        if path in _held:
            _held[path][1] += 1
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise TableBusy(refusal(holder)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} ({purpose})\n".encode())
        _held[path] = [fd, 1]


def _release(path: Path) -> None:
    with _guard:
        entry = _held[path]
        entry[1] -= 1
        if entry[1] == 0:
            del _held[path]
            fcntl.flock(entry[0], fcntl.LOCK_UN)
            os.close(entry[0])


@contextmanager
def writing(settings: Settings, tables: Iterable[str], purpose: str) -> Iterator[None]:
    """Hold the write locks of `tables` (all or none) while the block runs."""
    acquired: list[Path] = []
    try:
        for table in sorted(set(tables)):
            path = _lock_file(settings, table)
            _acquire(path, purpose, lambda holder, table=table: (
                f"{table} is being written by {holder}; stop that first (Ctrl-C, or "
                f"`lakehouse ingest`'s own stop), then run this again"))
            acquired.append(path)
        yield
    finally:
        for path in reversed(acquired):
            _release(path)


@contextmanager
def running_alone(settings: Settings, service: str) -> Iterator[None]:
    """Refuse a second `service` (e.g. `lakehouse ingest`) on the same state folder while
    the block runs, naming the process that holds it."""
    path = _lock_file(settings, service.replace(" ", "-"))
    _acquire(path, service, lambda holder: (
        f"`{service}` already runs on {settings.state_path} ({holder.replace(f' ({service})', '')}"
        f"); stop it first (Ctrl-C in its terminal, or kill -TERM its pid)"))
    try:
        yield
    finally:
        _release(path)
