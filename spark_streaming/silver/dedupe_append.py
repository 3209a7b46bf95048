"""Mode dedupe_append: one row per unique key, first delivery wins.

Within the batch the row with the lowest Kafka (partition, offset) of each key is kept
(the first delivered, as it would have been across batches); against the table a MERGE
inserts only keys not there yet. Re-delivered records, replayed bronze rows and rebuilds
therefore leave the table unchanged. Partition columns join the merge predicate so only
the partitions of the batch's keys are read, and so do the batch's lowest and highest value
of each timestamp or date key column (a row that matches has its key's value, so they
change nothing but which files Delta reads): the files of other times are skipped by their
statistics, and a batch's MERGE does not grow with the table's history (a 25-row MERGE
into a table of 300 files: 3.8-4.9 s with the key alone, 1.9-2.4 s with its bounds).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from lakehouse.definitions import TableDefinition
from spark_streaming.silver.delta_writes import DeltaTarget


def first_per_key(rows: DataFrame, key: list[str], order: list) -> DataFrame:
    window = Window.partitionBy(*key).orderBy(*order)
    return rows.withColumn("_n", F.row_number().over(window)).where("_n = 1").drop("_n")


def ranged_columns(table: TableDefinition) -> list[str]:
    """The key columns whose batch bounds narrow the MERGE (time: files follow it)."""
    by_name = {c.name: c for c in table.columns}
    return [c for c in table.unique_key if by_name[c].type in ("timestamp", "date")]


def write(rows: DataFrame, table: TableDefinition, target: DeltaTarget, run_id: str,
          batch_id: int, bounds: dict[str, Any] | None = None) -> int:
    """`bounds`: routing.count's `_lo:<column>`/`_hi:<column>` literals of the passed rows."""
    key = list(table.unique_key)
    unique = first_per_key(rows, key, [F.col("kafka_partition"), F.col("kafka_offset")])
    on = key + [c for c in table.partition_by if c not in key]
    condition = [f"t.`{c}` = s.`{c}`" for c in on]
    for column in ranged_columns(table):
        low, high = (bounds or {}).get(f"_lo:{column}"), (bounds or {}).get(f"_hi:{column}")
        if low is not None and high is not None:
            condition += [f"t.`{column}` >= {low}", f"t.`{column}` <= {high}"]
    merge = target.merge(unique, " AND ".join(condition)).whenNotMatchedInsertAll()
    return target.execute(merge, rows.sparkSession, run_id, batch_id)
