"""A small gold round's inputs, read into the driver with delta-rs: each source's changed
rows (its change data feed) and the silver rows the metric's scope names, registered as
Spark views of local data that the metric's own SQL then reads.

Through delta-spark, every silver version a round pins or reads the change feed of has its
state computed in Spark jobs (about a second a table on this driver, benchmarks/README.md)
before a dozen small jobs over the Delta sources; delta-rs reads a version's log and the
files the scope's partitions and statistics leave in a fraction of that, and the metric's
jobs then run on a few thousand rows in memory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import deltalake
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake.exceptions import DeltaError
from pyspark.sql import SparkSession

from lakehouse.storage import storage_options, table_uri
from settings import Settings
from spark_streaming.gold.metric import RowScope
from spark_streaming.gold.progress import SourceProgress

# At most how many rows the files a small round reads may hold (their Arrow is in the
# driver's memory for a moment, then only the scope's rows): a day of 500 stations
# reporting once a minute is 720,000.
DRIVER_READ_ROWS = 2_000_000


def _open(settings: Settings, table: str, version: int) -> deltalake.DeltaTable:
    uri = table_uri(settings, table)
    return deltalake.DeltaTable(uri, version=version,
                                storage_options=storage_options(settings, uri))


def _plain(field: pa.Field) -> pa.Field:
    """The field in the Arrow types Spark's `createDataFrame` takes (no view or large
    variants)."""
    kind = field.type
    if pa.types.is_string_view(kind) or pa.types.is_large_string(kind):
        return field.with_type(pa.string())
    if pa.types.is_binary_view(kind) or pa.types.is_large_binary(kind):
        return field.with_type(pa.binary())
    if pa.types.is_large_list(kind) or pa.types.is_list_view(kind):
        return field.with_type(pa.list_(_plain(kind.value_field)))
    return field


def _for_spark(rows: pa.Table) -> pa.Table:
    schema = pa.schema([_plain(f) for f in rows.schema])
    return rows if schema == rows.schema else rows.cast(schema)


def changed_rows(settings: Settings, progress: SourceProgress,
                 columns: list[str]) -> pa.Table | None:
    """`columns` of every row inserted, deleted or updated (both images) after the consumed
    version up to the current one, as Spark's change feed gives them; no rows when the
    source has no news; None when the feed cannot be read (cleaned up): rebuild."""
    table = _open(settings, progress.table, progress.current)
    try:
        if not progress.has_news:
            schema = pa.schema(table.schema().to_arrow())
            return _for_spark(pa.schema([schema.field(c) for c in columns]).empty_table())
        assert progress.consumed is not None
        try:
            feed = table.load_cdf(starting_version=progress.consumed + 1,
                                  ending_version=progress.current, columns=columns)
            return _for_spark(pa.RecordBatchReader.from_stream(feed).read_all())
        except (DeltaError, OSError):  # a version's log or change files cleaned up
            return None
    finally:
        del table  # see docs/architecture.md: delta-rs objects are dropped explicitly


def _rows_in(table: deltalake.DeltaTable, dataset: ds.Dataset) -> int | None:
    """Rows the dataset's files hold, from the log (None: a file without the figure)."""
    actions = pa.table(table.get_add_actions(flatten=True)).select(["path", "num_records"])
    held = dict(zip(actions["path"].to_pylist(), actions["num_records"].to_pylist(),
                    strict=True))
    counts = [held.get(fragment.path) for fragment in dataset.get_fragments()]
    return None if None in counts else sum(c for c in counts if c is not None)


def scoped_rows(settings: Settings, source: str, version: int,
                scope: RowScope | None) -> pa.Table | None:
    """The rows of `source` at `version` within `scope` (none for None), every column;
    None when the files the scope leaves hold more than DRIVER_READ_ROWS rows (a large
    system's days belong on Spark's executors, not in the driver's memory)."""
    table = _open(settings, source, version)
    try:
        if scope is None:
            return _for_spark(pa.schema(table.schema().to_arrow()).empty_table())
        time = pc.field(scope.time_column)
        during = (time >= scope.start) & (time < scope.end)
        files: list[tuple[str, str, object]] = [(scope.time_column, ">=", scope.start),
                                                (scope.time_column, "<", scope.end)]
        if scope.date_column is not None:
            days = sorted(scope.members.get(scope.date_column) or scope.days())
            files.append((scope.date_column, "in", days))
        dataset: ds.Dataset = table.to_pyarrow_dataset(file_pruning_predicate=files)
        held = _rows_in(table, dataset)
        if held is None or held > DRIVER_READ_ROWS:
            return None
        # The files' row groups are pruned by time only: delta-rs 1.6.6 gives each file
        # its statistics as a pyarrow guarantee, some of them string views, and pyarrow
        # 26 has no kernel comparing those with a filter's strings (a live ingest's
        # `isin` on station_id failed so); the other conditions apply in memory.
        rows = _for_spark(dataset.to_table(filter=during))
        wanted = during
        for column, values in scope.members.items():
            wanted &= pc.field(column).isin(list(values))
        return rows.filter(wanted)
    finally:
        del table


class LocalViews(Mapping[str, str]):
    """source table name -> a temporary view (`<prefix><table>`) of Arrow rows held by the
    driver; `close` drops the views."""

    def __init__(self, spark: SparkSession, prefix: str, rows: Mapping[str, pa.Table]) -> None:
        self._spark = spark
        self._names: dict[str, str] = {}
        for source, table in rows.items():
            name = f"{prefix}{source}"
            spark.createDataFrame(table).createOrReplaceTempView(name)
            self._names[source] = name

    def __getitem__(self, source: str) -> str:
        return self._names[source]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def close(self) -> None:
        for name in self._names.values():
            self._spark.catalog.dropTempView(name)
        self._names.clear()
