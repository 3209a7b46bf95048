"""What a gold metric is to the runner: its silver sources and two computations, all of
it over Spark temporary views of silver pinned at the versions being consumed."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from settings import Settings


class PinnedViews(Mapping[str, str]):
    """silver table name -> a temporary view of the version being consumed.

    Every lookup registers a fresh read: Spark 4.1.4 caches a Python data source's planned
    read (pushed filters, pruned files) on the relation a view holds, and two scans of one
    relation in one query with different filters share it (measured: a join of `k >= 5`
    and `k <= 2` of one view returned nothing; here, statuses read with another scan's
    filters). One relation per scan avoids sharing plans at all. `close` drops the views.
    """

    _serial = itertools.count()

    def __init__(self, spark: SparkSession, settings: Settings, versions: Mapping[str, int],
                 uris: Mapping[str, str]) -> None:
        self._spark, self._settings = spark, settings
        self._versions, self._uris = dict(versions), dict(uris)
        self._registered: list[str] = []

    def __getitem__(self, source: str) -> str:
        name = f"gold_src_{source}_{next(self._serial)}"
        (self._spark.read.format("lakehouse_delta")
         .option("table", self._uris[source])
         .option("versionAsOf", str(self._versions[source]))
         .option("profile", self._settings.profile)
         .load().createOrReplaceTempView(name))
        self._registered.append(name)
        return name

    def close(self) -> None:
        for name in self._registered:
            self._spark.catalog.dropTempView(name)
        self._registered.clear()

    def __iter__(self) -> Iterator[str]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)


Views = Mapping[str, str]
# silver table name -> temporary view of its rows changed since the last gold run
Changes = Mapping[str, str]


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


def bounds_of(column: str) -> str:
    """SELECT list of the min and max of a timestamp column as text (`lo`, `hi`): text in
    the session time zone (UTC), where collected datetimes would be in the driver's zone."""
    return (f"CAST(min({column}) AS STRING) AS lo, CAST(max({column}) AS STRING) AS hi")


def literal_ts(text: str) -> str:
    """A Spark SQL timestamp literal from `bounds_of` text."""
    return f"TIMESTAMP '{text}'"


def materialize(spark: SparkSession, frame: DataFrame, name: str) -> str:
    """Compute a small intermediate result once (keys, scopes) and register it as view
    `name`: later queries then neither re-read silver for it nor share its scan plan."""
    spark.createDataFrame(frame.toArrow(), schema=frame.schema).createOrReplaceTempView(name)
    return name
