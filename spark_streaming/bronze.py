"""Bronze ingestion: each Kafka topic -> `bronze_<topic>` Delta table, raw and append-only.

Exactly once: the source's offsets live in the query's checkpoint and every micro-batch is
one Delta commit carrying an app transaction (query app id, batch id), so a batch replayed
after a crash is recognised and skipped by the Delta writer.
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from lakehouse.storage import table_uri
from settings import Settings

log = logging.getLogger("lakehouse.bronze")
Report = Callable[[str], None]


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
    def app_id(self) -> str:
        """Stable id of this query's Delta app transactions (same across restarts)."""
        return f"lakehouse-{self.table}"


def plan(settings: Settings, topics: list[str]) -> list[BronzeQuery]:
    queries = []
    for topic in topics:
        table = bronze_table_name(topic)
        queries.append(BronzeQuery(topic, table, table_uri(settings, table),
                                   f"{settings.checkpoint_root}/{table}"))
    return queries


def bronze_frame(spark: SparkSession, settings: Settings, query: BronzeQuery,
                 max_offsets_per_trigger: int | None = None) -> DataFrame:
    """Raw records of one topic with their Kafka coordinates and the ingestion time."""
    reader = (spark.readStream.format("lakehouse_kafka")
              .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
              .option("subscribe", query.topic)
              .option("startingOffsets", "earliest")
              .option("endOffsetProbe", str(settings.kafka.end_offset_probe).lower())
              .option("checkpointLocation", query.checkpoint))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load().select(
        "key", "value", "headers", "topic", "partition", "offset",
        F.col("timestamp").alias("kafka_timestamp"),
        F.col("timestampType").alias("kafka_timestamp_type"),
        F.current_timestamp().alias("ingested_at"),
    )


def start_query(spark: SparkSession, settings: Settings, query: BronzeQuery, *,
                available_now: bool, interval: str = "10 seconds",
                max_offsets_per_trigger: int | None = None) -> StreamingQuery:
    writer = (bronze_frame(spark, settings, query, max_offsets_per_trigger).writeStream
              .format("lakehouse_delta")
              .queryName(query.table)
              .option("table", query.table_uri)
              .option("txnAppId", query.app_id)
              # the writer runs in Spark's Python workers: name the profile whose
              # storage settings (endpoint, credentials) it must load
              .option("profile", settings.profile)
              .option("delta.appendOnly", "true")
              .option("checkpointLocation", query.checkpoint))
    writer = (writer.trigger(availableNow=True) if available_now
              else writer.trigger(processingTime=interval))
    return writer.start()


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


def run_available_now(spark: SparkSession, settings: Settings, topics: list[str],
                      report: Report, max_offsets_per_trigger: int | None = None,
                      stop: threading.Event | None = None) -> dict[str, int]:
    """Catch up every topic, re-running until a round reads nothing; rows read per table.

    One availableNow run ends at the offsets seen when it started (and after a crash it
    only finishes the interrupted batch), hence the loop.
    """
    totals = {q.table: 0 for q in plan(settings, topics)}
    round_number = 0
    while stop is None or not stop.is_set():
        round_number += 1
        running = [(q, start_query(spark, settings, q, available_now=True,
                                   max_offsets_per_trigger=max_offsets_per_trigger))
                   for q in plan(settings, topics)]
        read_this_round = 0
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
        if read_this_round == 0:
            break
    return totals


def run_continuous(spark: SparkSession, settings: Settings, topics: list[str], report: Report,
                   stop: threading.Event, interval: str = "10 seconds",
                   max_offsets_per_trigger: int | None = None) -> None:
    """Run every topic's query on a processing-time trigger until `stop` is set."""
    running = [(q, start_query(spark, settings, q, available_now=False, interval=interval,
                               max_offsets_per_trigger=max_offsets_per_trigger))
               for q in plan(settings, topics)]
    last_report = 0.0
    try:
        while not stop.is_set():
            for spec, query in running:
                if not query.isActive:
                    raise RuntimeError(f"{spec.table} stopped: {query.exception()}")
            if time.monotonic() - last_report > 30:
                for spec, query in running:
                    progress = query.lastProgress or {}
                    report(f"{spec.table}: batch {progress.get('batchId', '-')}, "
                           f"{progress.get('numInputRows', 0)} rows in the last batch")
                last_report = time.monotonic()
            stop.wait(1)
    finally:
        for spec, query in running:
            query.stop()
            report(f"{spec.table}: stopped")
