"""Which silver versions a gold table has consumed, and the silver rows changed since.

The consumed version of each source is recorded in the user metadata of the gold commit
that wrote the rows computed from it (`{"lakehouse.gold": mode, "consumed": {silver table:
version}}`), so a crash never leaves gold and its progress out of step. The progress is
read from the Delta log alone (delta-rs, read-only, no Spark needed), which lets the CLI
say "nothing to do" before a Spark session starts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from deltalake import DeltaTable
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

METADATA_KEY = "lakehouse.gold"


def commit_metadata(mode: str, consumed: Mapping[str, int]) -> str:
    """The user metadata of a gold commit: how it was made and the silver versions read."""
    return json.dumps({METADATA_KEY: mode, "consumed": dict(consumed)}, sort_keys=True)


def consumed_versions(gold: DeltaTable) -> dict[str, int]:
    """Silver versions recorded by the newest gold commit that recorded any (none: {})."""
    for commit in sorted(gold.history(), key=lambda c: -int(c.get("version", -1))):
        try:
            recorded = json.loads(commit.get("userMetadata") or "null")
        except ValueError:
            continue
        if isinstance(recorded, dict) and METADATA_KEY in recorded:
            return {str(k): int(v) for k, v in recorded.get("consumed", {}).items()}
    return {}


@dataclass(frozen=True)
class SourceProgress:
    """One silver source of a gold table: last consumed version and the version to read."""

    table: str
    consumed: int | None  # None: never consumed (the gold table needs a full build)
    current: int

    @property
    def has_news(self) -> bool:
        return self.consumed != self.current

    @property
    def replayable(self) -> bool:
        """Changes since `consumed` can be read (else the table was recreated: rebuild)."""
        return self.consumed is not None and self.consumed <= self.current


def source_progress(consumed: Mapping[str, int], source: str,
                    silver: DeltaTable) -> SourceProgress:
    return SourceProgress(source, consumed.get(source), silver.version())


def changed_rows(spark: SparkSession, silver_path: str, progress: SourceProgress,
                 columns: list[str]) -> DataFrame | None:
    """`columns` of every row inserted, deleted or updated (both images) in the versions
    after `consumed` up to `current`, read from silver's change data feed and kept on the
    executors; None when the feed cannot give them (log or change files already cleaned
    up), which makes the caller rebuild."""
    assert progress.consumed is not None
    if not progress.has_news:
        return None
    try:
        return (spark.read.format("delta").option("readChangeFeed", "true")
                .option("startingVersion", progress.consumed + 1)
                .option("endingVersion", progress.current)
                .load(silver_path).select(*columns).localCheckpoint(eager=True))
    except PySparkException:
        return None
