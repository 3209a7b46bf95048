"""Where each lakehouse table stands, read from its Delta log with delta-rs (no Spark): the
newest version and commit, rows added lately, rows held, and whether its data is fresh.

`lakehouse status` shows this; starting Spark to answer would take longer than the whole
status may. Freshness is the age of the newest commit that wrote rows (maintenance such as
OPTIMIZE or a property change does not make data fresh) against a threshold per layer.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from lakehouse.definitions import TableDefinition
from lakehouse.storage import storage_options, table_uri
from settings import Settings

# Minutes a layer's newest data may be old before it counts as stale. Bronze follows the
# dbt source freshness (warn after an hour); gold is rebuilt from silver on a slower
# cadence; quarantine and quality tables are written only when there is something to say,
# so their age says nothing (None: not checked).
DEFAULT_STALE_AFTER_MINUTES: dict[str, float | None] = {
    "bronze": 60, "silver": 60, "gold": 120, "quarantine": None, "quality": None}
HISTORY_LIMIT = 120  # commits read per table (one object each): 20 min of 10 s triggers
# Commits that write no new data (their time is not the data's freshness).
_MAINTENANCE = ("OPTIMIZE", "VACUUM START", "VACUUM END", "SET TBLPROPERTIES", "ADD CONSTRAINT",
                "DROP CONSTRAINT", "CREATE TABLE", "CREATE OR REPLACE TABLE", "ADD COLUMNS",
                "CHANGE COLUMN", "RESTORE", "FSCK", "UPDATE FIELD METADATA")
# operationMetrics keys that count new rows: Spark's writes and MERGE, delta-rs's writes
# and MERGE (the rows it wrote, as Spark's numOutputRows of a MERGE counts them).
_ADDED_ROWS_KEYS = ("numOutputRows", "numTargetRowsInserted", "num_added_rows",
                    "num_output_rows")


T = TypeVar("T")
R = TypeVar("R")


def _map_in_daemons(work: Callable[[T], R], items: list[T], workers: int) -> list[R]:
    """`work` over `items` in daemon threads, results in order. Not a ThreadPoolExecutor:
    its threads are joined at interpreter exit, so a caller that gave up waiting (a status
    past its deadline, S3 answering slowly) would still wait for them when exiting."""
    todo: queue.Queue[tuple[int, T]] = queue.Queue()
    for index, item in enumerate(items):
        todo.put((index, item))
    results: dict[int, R] = {}
    failures: list[BaseException] = []

    def drain() -> None:
        while True:
            try:
                index, item = todo.get_nowait()
            except queue.Empty:
                return
            try:
                results[index] = work(item)
            except BaseException as exc:  # handed to the caller below
                failures.append(exc)

    threads = [threading.Thread(target=drain, daemon=True, name=f"table-status-{n}")
               for n in range(max(min(workers, len(items)), 1))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return [results[i] for i in range(len(items))]


@dataclass
class TableStatus:
    table: str
    layer: str
    uri: str
    exists: bool
    version: int | None = None
    last_commit_at: float | None = None  # epoch seconds
    last_operation: str | None = None
    last_data_at: float | None = None  # newest commit that wrote rows
    rows: int | None = None  # rows in the current version (None: files without stats)
    rows_added_last_hour: int | None = None
    rows_added_at_least: bool = False  # more commits in the hour than were read
    quarantine_table: str | None = None  # silver: where its rejected rows go
    quarantined_rows: int | None = None
    stale_after_minutes: float | None = None
    freshness: str = "unknown"  # fresh | stale | no data | missing | not checked | unknown
    age_seconds: float | None = None
    error: str | None = None


def _added_rows(commit: dict) -> int:
    metrics = commit.get("operationMetrics") or {}
    for key in _ADDED_ROWS_KEYS:
        if key in metrics:
            try:
                return int(metrics[key])
            except (TypeError, ValueError):
                return 0
    return 0


def _is_data_commit(commit: dict) -> bool:
    return str(commit.get("operation", "")).upper() not in _MAINTENANCE and _added_rows(commit) > 0


def row_count(table: DeltaTable) -> int | None:
    """Rows of the table's current version from its log's file statistics (None when a
    file has none)."""
    actions = table.get_add_actions(flatten=True)
    column = actions.column("num_records")
    values = column.to_pylist() if hasattr(column, "to_pylist") else list(column)
    if any(v is None for v in values):
        return None
    return int(sum(values))


def read_table_status(settings: Settings, definition: TableDefinition, now: float,
                      stale_after_minutes: float | None) -> TableStatus:
    """One table's status; a table that cannot be read says why instead of raising."""
    uri = table_uri(settings, definition.name)
    status = TableStatus(definition.name, definition.layer, uri, exists=False,
                         stale_after_minutes=stale_after_minutes)
    try:
        table = DeltaTable(uri, storage_options=storage_options(settings, uri))
    except TableNotFoundError:
        status.freshness = "missing"
        return status
    except Exception as exc:  # storage errors come in many types; status must go on
        status.error = f"{type(exc).__name__}: {exc}"
        return status
    try:
        status.exists = True
        status.version = table.version()
        history = table.history(limit=HISTORY_LIMIT)  # newest first
        status.rows = row_count(table)
    except Exception as exc:
        status.error = f"{type(exc).__name__}: {exc}"
        return status
    finally:
        del table  # dropping it here, not at interpreter exit, avoids an abort in delta-rs
    if history:
        newest = history[0]
        status.last_commit_at = newest.get("timestamp", 0) / 1000 or None
        status.last_operation = newest.get("operation")
    hour_ago = now - 3600
    recent = [c for c in history if c.get("timestamp", 0) / 1000 >= hour_ago]
    status.rows_added_last_hour = sum(_added_rows(c) for c in recent)
    status.rows_added_at_least = len(recent) == len(history) == HISTORY_LIMIT
    data = next((c for c in history if _is_data_commit(c)), None)
    if data is not None:
        status.last_data_at = data["timestamp"] / 1000
        status.age_seconds = max(now - status.last_data_at, 0.0)
    if stale_after_minutes is None:
        status.freshness = "not checked"
    elif status.last_data_at is None:
        status.freshness = "no data"
    else:
        assert status.age_seconds is not None
        status.freshness = ("fresh" if status.age_seconds <= stale_after_minutes * 60
                            else "stale")
    return status


def holds_data(settings: Settings, name: str) -> bool:
    """Whether table `name` exists with data files, from its log alone (a storage error
    raises: it never reads as "empty")."""
    uri = table_uri(settings, name)
    storage = storage_options(settings, uri)
    if not DeltaTable.is_deltatable(uri, storage):
        return False
    table = DeltaTable(uri, storage_options=storage)
    try:
        return len(table.file_uris()) > 0
    finally:
        del table  # see docs/architecture.md: delta-rs objects are dropped explicitly


def quarantine_of(definition: TableDefinition, names: set[str]) -> str | None:
    """The quarantine table of a silver table (`silver_x` -> `quarantine_x`), if defined."""
    if definition.layer != "silver":
        return None
    name = "quarantine_" + definition.name.removeprefix("silver_")
    return name if name in names else None


def read_table_statuses(settings: Settings, definitions: list[TableDefinition],
                        stale_after: dict[str, float | None] | None = None,
                        now: float | None = None, workers: int = 8) -> list[TableStatus]:
    """Every defined table's status, read in parallel (each is a few small object reads),
    in the definitions' order; silver tables carry their quarantine table's row count."""
    thresholds = {**DEFAULT_STALE_AFTER_MINUTES, **(stale_after or {})}
    moment = time.time() if now is None else now
    statuses = _map_in_daemons(
        lambda d: read_table_status(settings, d, moment, thresholds.get(d.layer)),
        definitions, workers)
    by_name = {s.table: s for s in statuses}
    for definition, status in zip(definitions, statuses, strict=True):
        quarantine = quarantine_of(definition, set(by_name))
        if quarantine:
            status.quarantine_table = quarantine
            status.quarantined_rows = by_name[quarantine].rows
    return statuses
