"""Mode dedupe_append: one row per unique key, first delivery wins.

Within the batch the row with the lowest Kafka (partition, offset) of each key is kept
(the first delivered, as it would have been across batches); against the table a MERGE
inserts only keys not there yet. Re-delivered records, replayed bronze rows and rebuilds
therefore leave the table unchanged. Partition columns join the merge predicate so only
the partitions of the batch's keys are read. Once the table holds BOUNDED_MERGE_MIN_FILES
files, so do the batch's lowest and highest value of each timestamp or date key column (a
row that matches has its key's value, so they change nothing but which files Delta reads):
the files of other times are skipped by their statistics, and a batch's MERGE does not grow
with the table's history. Below that, the filter's fixed cost is not paid back (a table of a
few files: a 25-row batch 4.2-4.3 s with the key alone, 4.7-5.2 s with bounds; the MERGE
alone, key against bounds: 30 files 1.7-2.1 s against 1.4-1.9, 120 files 2.9-3.3 against
1.8-2.0, 300 files 3.8-4.9 against 1.9-2.4; benchmarks/README.md).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from lakehouse.definitions import TableDefinition
from spark_streaming.merge_clauses import Clause, key_predicate
from spark_streaming.silver.delta_writes import DeltaTarget


def first_per_key(rows: DataFrame, key: list[str], order: list) -> DataFrame:
    window = Window.partitionBy(*key).orderBy(*order)
    return rows.withColumn("_n", F.row_number().over(window)).where("_n = 1").drop("_n")


BOUNDED_MERGE_MIN_FILES = 50


def ranged_columns(table: TableDefinition) -> list[str]:
    """The key columns whose batch bounds narrow the MERGE (time: files follow it)."""
    by_name = {c.name: c for c in table.columns}
    return [c for c in table.unique_key if by_name[c].type in ("timestamp", "date")]


def bounded(target: DeltaTarget, spark: SparkSession) -> bool:
    """Whether the table's files are enough for time bounds to pay (an unknown count is
    taken as enough: the bounds never change the result)."""
    files = target.known_files(spark)
    return files is None or files >= BOUNDED_MERGE_MIN_FILES


def write(rows: DataFrame, table: TableDefinition, target: DeltaTarget, run_id: str,
          batch_id: int, bounds: dict[str, Any] | None = None, *,
          on_driver: bool = False) -> int:
    """`bounds`: routing.count's `_lo:<column>`/`_hi:<column>` literals of the passed rows
    (none: the key alone); Spark's MERGE only (delta-rs narrows the files it reads by the
    batch's own key values)."""
    key = list(table.unique_key)
    unique = first_per_key(rows, key, [F.col("kafka_partition"), F.col("kafka_offset")])
    on = key + [c for c in table.partition_by if c not in key]
    condition = [key_predicate(on)]
    for column in ranged_columns(table) if not on_driver else []:
        low, high = (bounds or {}).get(f"_lo:{column}"), (bounds or {}).get(f"_hi:{column}")
        if low is not None and high is not None:
            condition += [f"t.{column} >= {low}", f"t.{column} <= {high}"]
    return target.merge_once(unique, " AND ".join(condition), [Clause("insert_all")],
                             run_id, batch_id, on_driver=on_driver)
