"""Scan planning: which data files of a snapshot to read, and how to group them into Spark
input partitions.

Files are pruned by delta-rs (partition values and per-file min/max statistics); how many
were skipped is logged and kept on the `ScanPlan`, which `plan_scan` also returns to callers
that want to see it (tests, notebooks).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from pyspark.sql.datasource import Filter, InputPartition

from spark_streaming.delta_source.filters import pruning_predicate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ScanFile:
    """One data file to read: its path inside the table's pyarrow filesystem."""

    path: str
    size: int
    partition_values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScanPlan:
    table_uri: str
    version: int
    files: tuple[ScanFile, ...]
    files_total: int

    @property
    def files_skipped(self) -> int:
        return self.files_total - len(self.files)


class FileGroup(InputPartition):
    """A Spark input partition: a group of files read by one task, with the id of the plan
    it belongs to and the plan's group count (see scan_registry for why)."""

    def __init__(self, index: int, files: Sequence[ScanFile], plan_id: str = "",
                 group_count: int = 1) -> None:
        super().__init__(index)
        self.index = index
        self.files = tuple(files)
        self.plan_id = plan_id
        self.group_count = group_count


def fs_path(root: str, relative: str) -> str:
    """Where a log path (relative, or absolute) is in the table's pyarrow filesystem."""
    if relative.startswith("s3://"):
        return relative[len("s3://"):]
    if relative.startswith(("/", "file://")):
        return relative.removeprefix("file://")
    return f"{root}/{relative}"


def _active_files(table: DeltaTable) -> list[tuple[str, int, dict[str, Any]]]:
    """(physical relative path, size, typed partition values) of every file in the snapshot.
    The log stores paths URI-encoded; delta-rs's `file_uris` returns them decoded."""
    actions = pa.table(table.get_add_actions(flatten=False))
    if actions.num_rows == 0:
        return []
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    if "partition" in actions.column_names:
        partitions = actions.column("partition").to_pylist()
    else:
        partitions = [{}] * len(paths)
    return [(unquote(p), s, dict(v or {})) for p, s, v in zip(paths, sizes, partitions,
                                                              strict=True)]


def _relative_paths(uris: list[str], known: set[str]) -> set[str]:
    """Map delta-rs's absolute file URIs back to relative paths (prefix found once)."""
    if not uris:
        return set()
    prefix = None
    for rel in known:
        if uris[0].endswith("/" + rel):
            prefix = uris[0][: len(uris[0]) - len(rel)]
            break
    if prefix is None:
        return set(known)  # cannot map: keep everything (pruning is only an optimisation)
    return {u[len(prefix):] for u in uris if u.startswith(prefix)}


def plan_scan(table: DeltaTable, table_uri: str, root: str,
              filters: Sequence[Filter] = ()) -> ScanPlan:
    """Files of `table`'s loaded snapshot that may hold rows matching all `filters`."""
    files = _active_files(table)
    every = {rel for rel, _, _ in files}
    kept = set(every)
    for flt in filters:
        predicate = pruning_predicate(flt)
        if predicate is None or not kept:
            continue
        try:
            uris = table.file_uris(file_pruning_predicate=predicate)
        except Exception as exc:  # a predicate delta-rs cannot type-check: no pruning
            log.warning("lakehouse_delta: no file pruning for %r: %s", flt, exc)
            continue
        kept &= _relative_paths(uris, every)
    selected = tuple(ScanFile(fs_path(root, rel), size, values)
                     for rel, size, values in files if rel in kept)
    plan = ScanPlan(table_uri, table.version(), selected, len(files))
    log.info("lakehouse_delta scan of %s v%d: reading %d of %d files (%d skipped by "
             "partition values/statistics for %d pushed filters)", table_uri, plan.version,
             len(plan.files), plan.files_total, plan.files_skipped, len(filters))
    return plan


def group_files(files: Sequence[ScanFile], files_per_partition: int | None,
                max_partition_bytes: int, plan_id: str = "") -> list[FileGroup]:
    """Consecutive files packed into groups of at most `files_per_partition` files and about
    `max_partition_bytes` bytes; always at least one (possibly empty) group."""
    groups: list[list[ScanFile]] = []
    current: list[ScanFile] = []
    current_bytes = 0
    for scan_file in files:
        full = (files_per_partition is not None and len(current) >= files_per_partition) or (
            current and current_bytes + scan_file.size > max_partition_bytes)
        if full:
            groups.append(current)
            current, current_bytes = [], 0
        current.append(scan_file)
        current_bytes += scan_file.size
    if current or not groups:
        groups.append(current)
    return [FileGroup(i, g, plan_id, len(groups)) for i, g in enumerate(groups)]


def share_of(files: Sequence[ScanFile], index: int, count: int) -> list[ScanFile]:
    """Task `index` of `count`'s deterministic share of `files` (every file exactly once)."""
    return sorted(files, key=lambda f: f.path)[index::count]
