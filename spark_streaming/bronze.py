"""Bronze ingestion: each Kafka topic -> `bronze_<topic>` Delta table, raw and append-only.

Spark's own Kafka connector (`readStream.format("kafka")`, spark-sql-kafka) into a
foreachBatch that appends each micro-batch once. Exactly once: the source's offsets live in
the query's checkpoint and every append carries an app transaction (query id, batch id), as
Delta's streaming sink commits them, so a batch replayed after a crash is recognised and
skipped. A batch of at most `spark.driver_commit_rows` records is collected and appended
from the driver with delta-rs (`driver_commits`: a 20-50 record batch spent seconds in the
streaming sink's commit); a larger one is written by Spark's executors. Connect's producers
write in transactions: the source reads `read_committed`. A query whose checkpoint is gone
resumes after the offsets the table already holds.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StructType

from clients import kafka_admin
from connectors import kafka_inspect
from lakehouse.definitions import load_definitions
from lakehouse.storage import spark_uri, storage_options, table_uri
from lakehouse.table_status import holds_data
from settings import Settings
from settings.report import Report
from spark_streaming.checkpoint_offsets import committed_source_offsets
from spark_streaming.driver_commits import append_once
from spark_streaming.layer_progress import LayerProgress
from spark_streaming.query_restarts import RestartingQuery
from spark_streaming.session import confs_for_rows
from spark_streaming.spark_conf import SMALL_READ_ROWS

log = logging.getLogger("lakehouse.bronze")
EARLIEST = -2  # spark-sql-kafka's offset meaning "the partition's earliest"


def bronze_table_name(topic: str) -> str:
    """`bikes.station_status` -> `bronze_bikes_station_status`."""
    return "bronze_" + re.sub(r"[^0-9a-zA-Z]+", "_", topic).strip("_").lower()


@dataclass(frozen=True)
class BronzeQuery:
    topic: str
    table: str
    table_uri: str
    checkpoint: str

    @property
    def path(self) -> str:
        """The table's location as Spark opens it (S3 through S3A)."""
        return spark_uri(self.table_uri)

    def delta_app_id(self) -> str | None:
        """The app-transaction id bronze's appends commit under: the query id Spark keeps
        in the (local) checkpoint's metadata file; None without a checkpoint."""
        try:
            return str(json.loads(Path(self.checkpoint, "metadata").read_text())["id"])
        except (FileNotFoundError, ValueError, KeyError):
            return None


def declared_bronze_topics(settings: Settings) -> dict[str, str]:
    """Topic as on the broker -> the bronze table whose definition stores it (the table
    file names the topic without the prefix; the profile's prefix is added here only)."""
    return {settings.kafka.topic(d.source.topic): d.name for d in load_definitions()
            if d.layer == "bronze" and d.source is not None and d.source.topic}


def plan(settings: Settings, topics: list[str]) -> list[BronzeQuery]:
    """One query per topic, into its declared bronze table (an undeclared topic, such as a
    test's own, into `bronze_table_name(topic)`)."""
    declared = declared_bronze_topics(settings)
    queries = []
    for topic in topics:
        table = declared.get(topic) or bronze_table_name(topic)
        queries.append(BronzeQuery(topic, table, table_uri(settings, table),
                                   f"{settings.checkpoint_root}/{table}"))
    return queries


def log_ends(settings: Settings, topic: str) -> dict[int, int]:
    """Each partition's last stable offset (what a read_committed consumer can reach)."""
    admin = kafka_admin(settings)
    partitions = kafka_inspect.partitions_of(admin, [topic])
    ends = kafka_inspect.log_ends(admin, partitions, committed_only=True)
    if len(ends) < len(partitions):  # never "caught up" on partitions the broker left out
        raise RuntimeError(f"topic {topic}: the broker gave no end offset for partitions "
                           f"{sorted(p for t, p in partitions if (t, p) not in ends)}")
    return {partition: offset for (_, partition), offset in ends.items()}


def _has_progress(spark: SparkSession, checkpoint: str) -> bool:
    """Whether the checkpoint (local or remote) holds an offset log Spark resumes from."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint}/offsets")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
    return bool(fs.exists(path)) and len(fs.listStatus(path)) > 0


def starting_offsets(spark: SparkSession, settings: Settings, query: BronzeQuery) -> str:
    """Where a query without a checkpoint starts: after the last offset the table holds per
    partition (a deleted or moved checkpoint never re-reads nor skips a record), the
    earliest offset for partitions the table has not seen."""
    # asked of the log (delta-rs): a Spark job per table only to find an empty one (each
    # ingest on new tables) cost 0.5-1 s a topic, one after the other
    if not holds_data(settings, query.table):
        return "earliest"
    held = {int(row["partition"]): int(row["last"]) for row in
            spark.read.format("delta").load(query.path)
            .where(F.col("topic") == query.topic)
            .groupBy("partition").agg(F.max("offset").alias("last")).collect()}
    if not held:
        return "earliest"
    partitions = set(log_ends(settings, query.topic)) | set(held)
    log.warning("%s: no checkpoint at %s; resuming after the offsets the table holds",
                query.table, query.checkpoint)
    return json.dumps({query.topic: {str(p): held[p] + 1 if p in held else EARLIEST
                                     for p in sorted(partitions)}})


def source_options(spark: SparkSession, settings: Settings, query: BronzeQuery,
                   max_offsets_per_trigger: int | None = None) -> dict[str, str]:
    """Options of the query's spark-sql-kafka source."""
    options = {
        "kafka.bootstrap.servers": settings.kafka_bootstrap,
        "subscribe": query.topic,
        "includeHeaders": "true",
        # Kafka Connect writes in transactions: never read what was aborted or is open.
        "kafka.isolation.level": "read_committed",
        # a record deleted by retention before bronze read it stops the query, loudly
        "failOnDataLoss": "true",
        # A broker restart (or a leader moving) makes offset lookups fail for a while:
        # retry for about a minute before the query fails (default: 3 tries 10 ms apart).
        "fetchOffset.numRetries": "30",
        "fetchOffset.retryIntervalMs": "2000",
        # ... and each try gives up after 15 s: after a broker of a cluster died, the
        # driver's offset lookup waited for a node assignment until the default 60 s ran
        # out (the cluster test's bronze stood still 60 s after its kill -9 of a broker).
        # A request's own timeout may not exceed it (Kafka refuses the client otherwise).
        "kafka.default.api.timeout.ms": "15000",
        "kafka.request.timeout.ms": "10000",
        # Spark's consumer asks the broker for offsets on every poll: the default 500
        # records a poll made a 1M-record batch spend its time on requests (warm run
        # 21.6 s against 14.6 s with these three, measured with `make bench BENCH=bronze`)
        "kafka.max.poll.records": "20000",
        "kafka.max.partition.fetch.bytes": str(16 * 2**20),
        "kafka.fetch.max.bytes": str(64 * 2**20),
        # logs in as the spark role (kafka.auth); Spark redacts sasl.jaas.config in logs
        **{f"kafka.{key}": value
           for key, value in settings.kafka.java_client_auth("spark").items()},
    }
    if not _has_progress(spark, query.checkpoint):
        options["startingOffsets"] = starting_offsets(spark, settings, query)
    if max_offsets_per_trigger:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    return options


def bronze_frame(spark: SparkSession, settings: Settings, query: BronzeQuery,
                 max_offsets_per_trigger: int | None = None) -> DataFrame:
    """Raw records of one topic with their Kafka coordinates and the ingestion time."""
    reader = spark.readStream.format("kafka").options(
        **source_options(spark, settings, query, max_offsets_per_trigger))
    return reader.load().select(
        "key", "value", "headers", "topic", "partition", "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        F.current_timestamp().alias("ingested_at"),
    )


def ensure_table(spark: SparkSession, query: BronzeQuery, schema: StructType) -> None:
    """Create the bronze table, append-only, when neither `lakehouse tables apply` nor an
    earlier run did (the table file's other properties follow with `tables apply`).

    Asked first whether the log exists: `createIfNotExists` resolves the whole table even
    when it is there (8 tables: 0.8 s warm, 2.4 s in a new driver, against 0.08 s)."""
    if DeltaTable.isDeltaTable(spark, query.path):
        return
    (DeltaTable.createIfNotExists(spark).location(query.path).addColumns(schema)
     .property("delta.appendOnly", "true").execute())


class BronzeWriter:
    """The foreachBatch of one bronze query: each micro-batch appended once under the
    query's id and the batch id (the app transaction Delta's streaming sink commits, so a
    table and checkpoint the sink wrote go on without a gap or a duplicate)."""

    def __init__(self, settings: Settings, query: BronzeQuery, *,
                 expected_rows: int | None = None) -> None:
        self.query = query
        # a batch known to be larger than a driver commit takes goes to the executors
        # without the probe's job (a catch-up of a large backlog reads it twice otherwise)
        limit = settings.spark.driver_commit_rows
        self.driver_rows = 0 if expected_rows is not None and expected_rows > limit else limit
        self._options = storage_options(settings, query.table_uri)
        self._app_id: str | None = None
        self._started = threading.Event()

    def started(self, streaming: StreamingQuery) -> StreamingQuery:
        """Learn the query's id (its first batch may run before `start` returns)."""
        self._app_id = str(streaming.id)
        self._started.set()
        return streaming

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self._started.wait()
        assert self._app_id is not None
        # one job: at most one row more than a driver commit takes (the Kafka reads stop
        # there), and those rows are the batch when it is small
        few = batch.limit(self.driver_rows + 1).toArrow() if self.driver_rows else None
        if few is not None and few.num_rows <= self.driver_rows:
            if few.num_rows:  # offsets of aborted transactions only: nothing to record
                append_once(self.query.table_uri, self._options, few, self._app_id, batch_id)
            return
        (batch.write.format("delta").mode("append").option("txnAppId", self._app_id)
         .option("txnVersion", batch_id).save(self.query.path))


def start_query(spark: SparkSession, settings: Settings, query: BronzeQuery, *,
                available_now: bool, interval: str = "10 seconds",
                max_offsets_per_trigger: int | None = None,
                backlog_rows: int | None = None) -> StreamingQuery:
    """`backlog_rows`, when known (a catch-up), bounds each batch's size with
    `max_offsets_per_trigger`, so a large batch skips the driver commit's probe."""
    frame = bronze_frame(spark, settings, query, max_offsets_per_trigger)
    ensure_table(spark, query, frame.schema)
    expected = (None if backlog_rows is None
                else min(backlog_rows, max_offsets_per_trigger or backlog_rows))
    sink = BronzeWriter(settings, query, expected_rows=expected)
    writer = (frame.writeStream.foreachBatch(sink).queryName(query.table)
              .option("checkpointLocation", query.checkpoint))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=interval))
    return sink.started(writer.start())


@contextmanager
def stop_on_signals() -> Iterator[threading.Event]:
    """An event set by Ctrl-C or SIGTERM, so queries can be stopped cleanly."""
    stop = threading.Event()

    def handler(signum: int, _frame: object) -> None:
        log.warning("received %s, stopping after the current micro-batch",
                    signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _rows(query: StreamingQuery) -> int:
    return sum(int(p.get("numInputRows", 0)) for p in query.recentProgress)


def caught_up(settings: Settings, query: BronzeQuery) -> bool:
    """True when another availableNow round of `query` would provably read nothing.

    Holds when the checkpoint's newest batch is committed and ended at the log end
    (last stable offset) of every partition the topic has now. Anything else (a remote
    checkpoint, a batch left uncommitted by a crash, new records, new partitions) says
    False: run the round.
    """
    reached = _reached(query)
    if reached is None:
        return False
    return all(reached.get(p, -1) >= end for p, end in log_ends(settings, query.topic).items())


def _reached(query: BronzeQuery) -> dict[int, int] | None:
    """Each partition's offset the checkpoint's newest committed batch ended at; None
    without exactly one such batch (no checkpoint, a remote one, an uncommitted batch)."""
    offsets = committed_source_offsets(query.checkpoint)
    if offsets is None or len(offsets) != 1:
        return None
    return {int(p): int(o) for p, o in offsets[0].get(query.topic, {}).items()}


def backlog(settings: Settings, query: BronzeQuery) -> int:
    """At most how many records a round of `query` reads: each partition's log end past
    the checkpoint's offset (past 0 without one: an upper bound)."""
    reached = _reached(query) or {}
    return sum(max(0, end - reached.get(p, 0))
               for p, end in log_ends(settings, query.topic).items())


def run_available_now(spark: SparkSession, settings: Settings, topics: list[str],
                      report: Report, max_offsets_per_trigger: int | None = None,
                      stop: threading.Event | None = None,
                      rounds: list[dict[str, float]] | None = None) -> dict[str, int]:
    """Catch up every topic, re-running until nothing is left; rows read per table.

    One availableNow run ends at the offsets seen when it started (and after a crash it
    only finishes the interrupted batch), hence the loop. A round that read rows is
    followed by another only for the queries that are not `caught_up` (a cheap broker
    query instead of a Spark query start). `rounds`, when given, gets each round's
    seconds and rows (and the seconds of the caught-up check).
    """
    totals = {q.table: 0 for q in plan(settings, topics)}
    pending = plan(settings, topics)
    round_number = 0
    while pending and (stop is None or not stop.is_set()):
        round_number += 1
        began = time.monotonic()
        running = []
        for q in pending:
            # a query keeps the confs of its start: interpreted for a small backlog
            rows = backlog(settings, q)
            with confs_for_rows(spark, settings, rows, SMALL_READ_ROWS):
                running.append((q, start_query(spark, settings, q, available_now=True,
                                               max_offsets_per_trigger=max_offsets_per_trigger,
                                               backlog_rows=rows)))
        read_this_round = 0
        still_pending = []
        for spec, query in running:
            while not query.awaitTermination(1):
                if stop is not None and stop.is_set():
                    query.stop()
            if query.exception() is not None:
                raise RuntimeError(f"{spec.table}: {query.exception()}")
            rows = _rows(query)
            totals[spec.table] += rows
            read_this_round += rows
            report(f"round {round_number}: {spec.topic} -> {spec.table}: {rows} rows")
            if rows:
                still_pending.append(spec)
        round_s = time.monotonic() - began
        began = time.monotonic()
        pending = [q for q in still_pending
                   if not caught_up(settings, q)]
        if rounds is not None:
            rounds.append({"round": round_number, "seconds": round(round_s, 2),
                           "rows": read_this_round,
                           "check_seconds": round(time.monotonic() - began, 2)})
        for spec in still_pending:
            if spec not in pending:
                report(f"{spec.table}: caught up (nothing left to read)")
    return totals


def run_continuous(spark: SparkSession, settings: Settings, topics: list[str], report: Report,
                   stop: threading.Event, interval: str = "10 seconds",
                   max_offsets_per_trigger: int | None = None) -> None:
    """Run every topic's query on a processing-time trigger until `stop` is set; a query
    that stops (its broker or S3 server away) is started again from its checkpoint."""
    running = [RestartingQuery(
        "bronze", spec.table,
        lambda spec=spec: start_query(spark, settings, spec, available_now=False,
                                      interval=interval,
                                      max_offsets_per_trigger=max_offsets_per_trigger),
        report, settings.ingest.recovery_timeout_seconds, pauses=settings.ingest.retry_pauses)
        for spec in plan(settings, topics)]
    last_report = time.monotonic()
    progress = LayerProgress("bronze")
    try:
        while not stop.is_set():
            for query in running:
                query.check()
            if time.monotonic() - last_report > settings.ingest.progress_interval_seconds:
                report(progress.line({q.table: q.query.recentProgress
                                      for q in running if q.query is not None}))
                last_report = time.monotonic()
            stop.wait(1)
    finally:
        for query in running:
            query.stop()
        report(f"bronze: {len(running)} queries stopped")
