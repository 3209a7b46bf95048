"""Delta commits with delta-spark, exactly once per (table, run, micro-batch).

Every write carries Delta's app transaction (run id, batch id): appends through the
writer's `txnAppId`/`txnVersion` options, MERGEs through the session's
`spark.databricks.delta.write.txnAppId`/`txnVersion`. Delta skips a write whose batch id
the table already recorded for the run, so a micro-batch replayed after a crash never
writes twice. Inside foreachBatch the batch's session is the streaming query's own clone,
so the MERGE settings never leak into another query's commits. CHECK constraints and NOT
NULL columns are enforced by Delta itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from delta.tables import DeltaMergeBuilder, DeltaTable
from py4j.protocol import Py4JError
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from lakehouse.storage import spark_uri, table_uri
from settings import Settings
from spark_streaming.conform import conformed

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

    def open(self, spark: SparkSession) -> DeltaTable:
        return DeltaTable.forPath(spark, self.path)

    def read(self, spark: SparkSession) -> DataFrame:
        return spark.read.format("delta").load(self.path)

    def schema(self, spark: SparkSession) -> StructType:
        """The table's schema, read from its log once: a run's table definitions are loaded
        once too, and every read costs a listing of the log on S3."""
        if self._schema is None:
            self._schema = self.open(spark).toDF().schema
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

    def append(self, data: DataFrame, run_id: str, batch_id: int) -> None:
        """Append `data` once for (run, batch); Delta skips a batch it recorded before."""
        (conformed(data, self.schema(data.sparkSession)).write.format("delta").mode("append")
         .option("txnAppId", run_id).option("txnVersion", batch_id).save(self.path))

    def append_new_records(self, data: DataFrame, run_id: str, batch_id: int) -> int:
        """Insert the rows whose Kafka coordinates the table does not hold yet: quarantine
        is append-only and keyed by (topic, partition, offset), so a rebuild from bronze
        does not add a record twice."""
        on = " AND ".join(f"t.{c} = s.{c}" for c in
                          ("kafka_topic", "kafka_partition", "kafka_offset"))
        merge = self.merge(data, on).whenNotMatchedInsertAll()
        return self.execute(merge, data.sparkSession, run_id, batch_id)

    def merge(self, data: DataFrame, predicate: str) -> DeltaMergeBuilder:
        """A MERGE of `data` (alias s) into the table (alias t) for the caller to finish."""
        return (self.open(data.sparkSession).alias("t")
                .merge(conformed(data, self.schema(data.sparkSession), keep_extra=True)
                       .alias("s"), predicate))

    @staticmethod
    def execute(merge: DeltaMergeBuilder, spark: SparkSession, run_id: str,
                batch_id: int) -> int:
        """Run the MERGE once for (run, batch); rows it changed."""
        with app_transaction(spark, run_id, batch_id):
            return merged_rows(merge.execute())
