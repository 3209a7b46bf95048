"""Gold commits: a full replace (delta-spark), or a replace of exactly the affected unique
keys (one MERGE: from the driver with delta-rs when it writes at most
`spark.driver_commit_rows` rows, as a silver batch does, on Spark's executors otherwise),
each one commit whose user metadata records the silver versions consumed (see
progress.py). Both writers enforce the tables' CHECK constraints and NOT NULL columns."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, TimestampType

from spark_streaming import driver_commits
from spark_streaming.conform import conformed
from spark_streaming.gold.progress import commit_metadata
from spark_streaming.merge_clauses import Clause, key_predicate

GONE = "_gold_gone"
_USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# set on a commit that only records consumed versions (nothing to write)
_RECORDED_PROPERTY = "lakehouse.gold.consumed"


@contextmanager
def _user_metadata(spark: SparkSession, text: str) -> Iterator[None]:
    spark.conf.set(_USER_METADATA, text)
    try:
        yield
    finally:
        spark.conf.unset(_USER_METADATA)


def replace_all(spark: SparkSession, path: str, rows: DataFrame,
                consumed: Mapping[str, int]) -> None:
    """Overwrite the whole table with `rows` (rebuild)."""
    schema = DeltaTable.forPath(spark, path).toDF().schema
    (conformed(rows, schema).write.format("delta").mode("overwrite")
     .option("userMetadata", commit_metadata("rebuild", consumed)).save(path))


def _key_summary(keys: DataFrame, ranged: Sequence[str]) -> tuple[int, list[str]]:
    """How many keys, and each time-typed key column's bounds over them as a target-side
    MERGE condition, in one job (text in the session time zone, as the column's literal)."""
    aggregates = [F.count(F.lit(1)).alias("n")]
    for i, column in enumerate(ranged):
        aggregates += [F.min(column).cast("string").alias(f"lo{i}"),
                       F.max(column).cast("string").alias(f"hi{i}")]
    row = keys.agg(*aggregates).first()
    assert row is not None
    bounds = []
    for i, column in enumerate(ranged):
        kind = "TIMESTAMP" if keys.schema[column].dataType == TimestampType() else "DATE"
        if row[f"lo{i}"] is not None:
            bounds += [f"t.`{column}` >= {kind} '{row[f'lo{i}']}'",
                       f"t.`{column}` <= {kind} '{row[f'hi{i}']}'"]
    return int(row["n"]), bounds


def _replace_clauses(columns: Sequence[str]) -> list[Clause]:
    """A keyed replace's MERGE: a tombstone deletes its key, a row updates or inserts it."""
    values = {c: f"s.{c}" for c in columns}
    return [Clause("delete", f"s.{GONE}"), Clause("update", f"NOT s.{GONE}", values),
            Clause("insert", f"NOT s.{GONE}", values)]


def replace_keys_from_driver(uri: str, options: dict[str, str], rows: pa.Table,
                             keys: pa.Table, unique_key: Sequence[str],
                             consumed: Mapping[str, int]) -> int:
    """`replace_keys` for rows and keys the driver holds (a small round), in one delta-rs
    commit: the MERGE, or with no key an empty append that records the consumed versions.
    Keys replaced."""
    key = list(unique_key)
    keys = keys.select(key).group_by(key).aggregate([])
    metadata = commit_metadata("incremental", consumed)
    if not keys.num_rows:
        driver_commits.record_only(uri, options, user_metadata=metadata)
        return 0
    gone = keys.join(rows.select(key), keys=key, join_type="left anti")
    schema = pa.schema([f.with_nullable(True) for f in rows.schema])
    tombstones = pa.Table.from_arrays(
        [gone[f.name].cast(f.type) if f.name in key else pa.nulls(gone.num_rows, f.type)
         for f in schema], schema=schema)
    source = pa.concat_tables([
        rows.cast(schema).append_column(GONE, pa.repeat(False, rows.num_rows)),
        tombstones.append_column(GONE, pa.repeat(True, gone.num_rows))])
    driver_commits.merge(uri, options, source, key_predicate(key),
                         _replace_clauses(rows.column_names), user_metadata=metadata)
    return keys.num_rows


def replace_keys(spark: SparkSession, path: str, rows: DataFrame, keys: DataFrame,
                 unique_key: Sequence[str], consumed: Mapping[str, int], *,
                 driver: tuple[str, dict[str, str], int] | None = None) -> int:
    """Make the rows with a unique key in `keys` equal `rows` (keys without a new row are
    deleted), in one MERGE commit; every key of `rows` must be in `keys`. Keys replaced.

    The MERGE reads only the target files whose statistics overlap the keys' range of each
    time-typed key column (a row that matches a key has that key's time), so a round's cost
    does not grow with the table's history. Gold's time keys are whole windows, hours and
    days: no value falls between the milliseconds Delta's file statistics keep.

    `driver` (the table's URI, its delta-rs storage options, at most how many keys): with
    no more keys than that, the MERGE runs from the driver with delta-rs (which narrows the
    files it reads by the source's own key values)."""
    table = DeltaTable.forPath(spark, path)
    schema = table.toDF().schema
    key = list(unique_key)
    ranged = [f.name for f in schema
              if f.name in key and f.dataType in (TimestampType(), DateType())]
    count, bounds = _key_summary(keys, ranged)
    metadata = commit_metadata("incremental", consumed)
    if not count:
        # no key, so no row either: Delta makes no commit for an empty MERGE, so the
        # consumed versions get a commit of their own and silver versions that changed
        # nothing here are not read again
        with _user_metadata(spark, metadata):
            spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                      f"('{_RECORDED_PROPERTY}' = '{metadata}')")
        return 0
    rows = conformed(rows, schema)
    gone = keys.select(*key).distinct().join(rows.select(*key), key, "left_anti")
    tombstones = gone.select(*[F.col(f.name) if f.name in key
                               else F.lit(None).cast(f.dataType).alias(f.name)
                               for f in schema])
    source = (rows.withColumn(GONE, F.lit(False))
              .unionByName(tombstones.withColumn(GONE, F.lit(True))).localCheckpoint())
    clauses = _replace_clauses(schema.fieldNames())
    if driver is not None and count <= driver[2]:
        driver_commits.merge(driver[0], driver[1], source.toArrow(), key_predicate(key),
                             clauses, user_metadata=metadata)
        return count
    condition = " AND ".join([key_predicate(key), *bounds])
    merge = table.alias("t").merge(source.alias("s"), condition)
    for clause in clauses:
        merge = clause.on_spark(merge)
    with _user_metadata(spark, metadata):
        merge.execute()
    return count
