"""Detect a scan plan that Spark reuses for another query, so it is not read stale.

Spark 4.1.4 caches a Python data source's planned read (the pickled reader and its
partitions) on the provider object that a DataFrame or a temporary view holds
(`PythonDataSourceV2.readInfo`, set by each filter pushdown, else planned once): a query
that pushes no filter reuses whatever the last planning of that provider produced
(measured: a view never saw rows inserted after its first read; before reader.py stopped
pruning by pushed filters, `df.where("p = 'b'").count()` then `df.count()` also returned
the filtered count). Within one query every scan of the provider reads the same plan,
which is why reader.py never prunes by pushed filters. A Python source cannot tell from
inside `read()` which query planned it, but tasks do know the SQL execution they run for.
The first execution to read a plan owns it; any other execution reading it is a reuse, so
the reader re-plans the latest snapshot. Executions of one query agree on the snapshot to
re-plan through the same registry.

The registry is a folder of small files, created atomically (link), on the executor's
local disk by default: right for local Spark (the embedded profile). On a multi-host
cluster give the option `scanRegistryDir` a folder shared by all executors.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

DEFAULT_DIR = Path(tempfile.gettempdir()) / "lakehouse_delta_scans"
_MAX_AGE_SECONDS = 24 * 3600


def current_execution() -> str | None:
    """The SQL execution (root id) the running task belongs to, if any."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return None
    return (context.getLocalProperty("spark.sql.execution.root.id")
            or context.getLocalProperty("spark.sql.execution.id"))


def _create_or_read(path: Path, value: str) -> str:
    """Atomically create `path` holding `value`; if it exists, return what it holds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    scratch.write_text(value)
    try:
        os.link(scratch, path)
        return value
    except FileExistsError:
        return path.read_text()
    finally:
        scratch.unlink(missing_ok=True)


def _purge_old(folder: Path) -> None:
    cutoff = time.time() - _MAX_AGE_SECONDS
    for entry in folder.iterdir():
        with contextlib.suppress(OSError):
            if entry.stat().st_mtime < cutoff:
                entry.unlink()


class ScanRegistry:
    def __init__(self, folder: str | None = None) -> None:
        self.folder = Path(folder) if folder else DEFAULT_DIR

    def owns(self, plan_id: str, execution: str) -> bool:
        """True when `execution` is the first (hence planning) execution to read the plan."""
        owner = _create_or_read(self.folder / f"{plan_id}.owner", execution)
        if owner == execution and random.random() < 0.01:
            _purge_old(self.folder)
        return owner == execution

    def agreed_version(self, plan_id: str, execution: str, choose: Callable[[], int]) -> int:
        """One table version for all tasks of `execution` re-planning `plan_id`."""
        path = self.folder / f"{plan_id}.{execution}.version"
        if path.exists():
            return int(path.read_text())
        return int(_create_or_read(path, str(choose())))
