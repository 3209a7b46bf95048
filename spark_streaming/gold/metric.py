"""What a gold metric is to the runner: its silver sources, two computations over Spark
temporary views of silver (pinned at the versions being consumed, or, in a small round,
only the rows `scope` names, read into the driver), and that scope."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from settings import Settings


class PinnedViews(Mapping[str, str]):
    """silver table name -> a temporary view of the version being consumed (Delta time
    travel, `versionAsOf`), so every query of one gold run sees the same silver.
    `close` drops the views."""

    def __init__(self, spark: SparkSession, versions: Mapping[str, int],
                 paths: Mapping[str, str]) -> None:
        self._spark = spark
        self._versions = dict(versions)
        self._names: dict[str, str] = {}
        for source, version in self._versions.items():
            name = f"gold_src_{source}"
            (spark.read.format("delta").option("versionAsOf", version).load(paths[source])
             .createOrReplaceTempView(name))
            self._names[source] = name

    def __getitem__(self, source: str) -> str:
        return self._names[source]

    def close(self) -> None:
        for name in self._names.values():
            self._spark.catalog.dropTempView(name)
        self._names.clear()

    def __iter__(self) -> Iterator[str]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)


Views = Mapping[str, str]
# silver table name -> temporary view of its rows changed since the last gold run
Changes = Mapping[str, str]


@dataclass(frozen=True)
class RowScope:
    """The rows of one silver source an incremental round reads: `time_column` in
    [start, end), and where given the `date_column` partition within those days and each
    `members` column's value in its set. A superset of what `compute_changed` reads from
    that source is enough: its own conditions still apply."""

    time_column: str
    start: datetime
    end: datetime
    date_column: str | None = None
    members: Mapping[str, Collection[object]] = field(default_factory=dict)

    def days(self) -> list[date]:
        """The UTC days of [start, end): the partitions to read (the session is UTC)."""
        first, last = self.start.date(), (self.end - timedelta(microseconds=1)).date()
        return [first + timedelta(days=n) for n in range((last - first).days + 1)]


# silver source -> the rows of it a round needs (None: none), from the sources' changed rows
Scope = Callable[[Mapping[str, pa.Table]], Mapping[str, RowScope | None]]


@dataclass(frozen=True)
class GoldMetric:
    table: str
    # silver source -> the columns of its changed rows the metric needs to find affected keys
    sources: Mapping[str, tuple[str, ...]]
    # every row of the table, from the pinned silver views
    compute_all: Callable[[SparkSession, Settings, Views], DataFrame]
    # (rows, keys): the recomputed rows of every affected key, and those keys (a key
    # without a row is deleted from gold)
    compute_changed: Callable[[SparkSession, Settings, Views, Changes],
                              tuple[DataFrame, DataFrame]]
    # which silver rows compute_changed reads, so a small round runs on them alone
    scope: Scope


def time_span(columns: Iterable[pa.ChunkedArray]) -> tuple[datetime, datetime] | None:
    """The earliest and latest value of timestamp columns of changed rows (None: none)."""
    values = [value for column in columns for value in
              (pc.min(column).as_py(), pc.max(column).as_py()) if value is not None]
    return (min(values), max(values)) if values else None


def utc_days(columns: Iterable[pa.ChunkedArray]) -> set[date]:
    """The UTC days of timestamp columns' values (delta-rs gives them in UTC)."""
    return {value.date() for column in columns for value in column.to_pylist()
            if value is not None}


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


def bounds_of(column: str) -> str:
    """SELECT list of the min and max of a timestamp column as text (`lo`, `hi`): text in
    the session time zone (UTC), where collected datetimes would be in the driver's zone."""
    return (f"CAST(min({column}) AS STRING) AS lo, CAST(max({column}) AS STRING) AS hi")


def literal_ts(text: str) -> str:
    """A Spark SQL timestamp literal from `bounds_of` text."""
    return f"TIMESTAMP '{text}'"


def materialize(spark: SparkSession, frame: DataFrame, name: str) -> str:
    """Compute a small intermediate result once (keys, scopes) and register it as view
    `name`: later queries then do not re-read silver for it."""
    frame.localCheckpoint(eager=True).createOrReplaceTempView(name)
    return name
