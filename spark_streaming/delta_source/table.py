"""Opening a Delta table through delta-rs: the current snapshot or a time-travel one."""

from __future__ import annotations

from datetime import datetime

from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError


class DeltaTableNotFound(FileNotFoundError):
    """No Delta table (no `_delta_log`) at the given URI."""


def try_open(table_uri: str, storage: dict[str, str]) -> DeltaTable | None:
    """The table's latest snapshot, or None when there is no table yet (first write)."""
    try:
        return DeltaTable(table_uri, storage_options=storage)
    except TableNotFoundError:
        return None


def open_snapshot(table_uri: str, storage: dict[str, str], version: int | None = None,
                  timestamp: datetime | None = None) -> DeltaTable:
    """The snapshot to read: latest, a version (versionAsOf) or the last one committed at
    or before a timestamp (timestampAsOf)."""
    try:
        table = DeltaTable(table_uri, version=version, storage_options=storage)
    except TableNotFoundError as exc:
        raise DeltaTableNotFound(
            f"no Delta table at {table_uri}: create it first (`lakehouse tables apply` for "
            "the project's tables, or a batch write: df.write.format('lakehouse_delta')"
            ".option('table', ...).mode('append').save())"
        ) from exc
    if timestamp is not None:
        table.load_as_version(timestamp)
    return table
