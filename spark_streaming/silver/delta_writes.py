"""Delta commits, exactly once per (table, run, micro-batch).

Every write carries Delta's app transaction (run id, batch id): appends through the
writer's `txnAppId`/`txnVersion` options, MERGEs through the session's
`spark.databricks.delta.write.txnAppId`/`txnVersion`, or, for a MERGE small enough to
run on the driver, through delta-rs's commit properties after asking the table for the
run's last batch id. Either way a micro-batch replayed after a crash never writes twice.
Inside foreachBatch the batch's session is the streaming query's own clone, so the MERGE
settings never leak into another query's commits. CHECK constraints and NOT NULL columns
are enforced by both writers.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from delta.tables import DeltaTable
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lakehouse.storage import spark_uri, storage_options, table_uri
from settings import Settings
from spark_streaming import driver_commits
from spark_streaming.conform import conformed, delta_schema
from spark_streaming.merge_clauses import Clause

_TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


@contextmanager
def app_transaction(spark: SparkSession, run_id: str, batch_id: int) -> Iterator[None]:
    """DML (MERGE, DELETE) run inside commits as (run_id, batch_id), once."""
    spark.conf.set(_TXN_APP_ID, run_id)
    spark.conf.set(_TXN_VERSION, str(batch_id))
    try:
        yield
    finally:
        spark.conf.unset(_TXN_APP_ID)
        spark.conf.unset(_TXN_VERSION)


def merged_rows(metrics: DataFrame | None) -> int:
    """Rows a MERGE inserted, updated or deleted (0 when Delta skipped it as done)."""
    row = metrics.first() if metrics is not None else None
    if row is None:
        return 0
    values = row.asDict()
    return sum(int(values.get(k) or 0) for k in
               ("num_inserted_rows", "num_updated_rows", "num_deleted_rows"))


class DeltaTarget:
    """One Delta table the silver job commits to."""

    def __init__(self, settings: Settings, name: str) -> None:
        self.name = name
        self.uri = table_uri(settings, name)
        self.path = spark_uri(self.uri)
        self._schema: StructType | None = None
        self._table: DeltaTable | None = None  # known_files' handle on the table's log
        self._options = storage_options(settings, self.uri)

    def open(self, spark: SparkSession) -> DeltaTable:
        return DeltaTable.forPath(spark, self.path)

    def read(self, spark: SparkSession) -> DataFrame:
        return spark.read.format("delta").load(self.path)

    def schema(self) -> StructType:
        """The table's schema, read from its log once (delta-rs): a run's table definitions
        are loaded once too, and every read costs a listing of the log on S3."""
        if self._schema is None:
            self._schema = delta_schema(self.uri, self._options)
        return self._schema

    def known_files(self, spark: SparkSession) -> int | None:
        """The table's data files, as the checksum Delta keeps with every commit says (1 ms;
        counting them, or Delta's own `numOfFilesIfKnown` on a partitioned table, costs a
        Spark job of about 1 s). None when the version has no checksum, or this Delta build
        has no such call (its internals, reached through the JVM)."""
        try:
            if self._table is None:
                self._table = self.open(spark)
            # the latest version this JVM knows: silver's own commits update it
            checksum = self._table._jdt.deltaLog().unsafeVolatileSnapshot().checksumOpt()
            return int(checksum.get().numFiles()) if checksum.isDefined() else None
        except Py4JError:
            return None

    def append(self, data: DataFrame, run_id: str, batch_id: int, *,
               on_driver: bool = False) -> None:
        """Append `data` once for (run, batch); Delta skips a batch it recorded before.
        `on_driver`: collected and appended with delta-rs, as `merge_once`."""
        rows = conformed(data, self.schema())
        if not on_driver:
            (rows.write.format("delta").mode("append")
             .option("txnAppId", run_id).option("txnVersion", batch_id).save(self.path))
            return
        driver_commits.append_once(self.uri, self._options, rows.toArrow(), run_id, batch_id)

    def append_new_records(self, data: DataFrame, run_id: str, batch_id: int, *,
                           on_driver: bool = False) -> int:
        """Insert the rows whose Kafka coordinates the table does not hold yet: quarantine
        is append-only and keyed by (topic, partition, offset), so a rebuild from bronze
        does not add a record twice."""
        on = " AND ".join(f"t.{c} = s.{c}" for c in
                          ("kafka_topic", "kafka_partition", "kafka_offset"))
        return self.merge_once(data, on, [Clause("insert_all")], run_id, batch_id,
                               on_driver=on_driver)

    def merge_once(self, data: DataFrame, predicate: str, clauses: Sequence[Clause],
                   run_id: str, batch_id: int, *, on_driver: bool) -> int:
        """MERGE `data` (alias s) into the table (alias t) once for (run, batch); rows it
        changed. `on_driver`: collect `data` and commit with delta-rs (small batches: no
        Spark job of the MERGE's own, no rebuild of the table's state in Spark)."""
        spark = data.sparkSession
        source = conformed(data, self.schema(), keep_extra=True)
        if on_driver:
            return driver_commits.merge(self.uri, self._options, source.toArrow(), predicate,
                                        clauses, once_for=(run_id, batch_id))
        merge = self.open(spark).alias("t").merge(source.alias("s"), predicate)
        for clause in clauses:
            merge = clause.on_spark(merge)
        with app_transaction(spark, run_id, batch_id):
            return merged_rows(merge.execute())
