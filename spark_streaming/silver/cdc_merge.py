"""Mode cdc_merge: Debezium change events applied to a current-state table.

Per key the batch's newest event (source LSN, then source commit time; the first delivered
copy of it) is merged; it replaces the row only when it is newer than the change the row
holds. So replays and out-of-order delivery converge on the state of the newest change.
A delete keeps the row (its `before` image) with is_deleted = true: a late, older event
then meets a row whose LSN is newer and is ignored, where a physically deleted row would
let it resurrect the rental.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakehouse.definitions import TableDefinition
from spark_streaming.merge_clauses import Clause, key_predicate
from spark_streaming.silver.dedupe_append import first_per_key
from spark_streaming.silver.delta_writes import DeltaTarget

NEWER = ("s.source_lsn > t.source_lsn OR "
         "(s.source_lsn = t.source_lsn AND s.source_ts_ms > t.source_ts_ms)")


def write(rows: DataFrame, key: list[str], table: TableDefinition, target: DeltaTarget,
          run_id: str, batch_id: int, *, on_driver: bool = False) -> int:
    # newest change first; among copies of one change the first delivered, as a replay
    # applied in a later batch leaves it (an equal change is not newer)
    order = [F.col("source_lsn").desc(), F.col("source_ts_ms").desc(),
             F.col("kafka_partition"), F.col("kafka_offset")]
    newest = first_per_key(rows, key, order)
    return target.merge_once(newest, key_predicate(key),
                             [Clause("update_all", NEWER), Clause("insert_all")],
                             run_id, batch_id, on_driver=on_driver)
