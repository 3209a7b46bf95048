"""The lakehouse_kafka streaming source against the real embedded broker and real Spark."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import NewTopic
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from infra.clients import kafka_admin, kafka_config
from infra.stack import Stack
from settings import Settings
from spark_streaming.kafka_source.offsets import apply_cap, plan_ranges
from tests.kafka_support import produce_transactions


def _topic(settings: Settings, partitions: int = 3, name: str | None = None) -> str:
    topic = name or f"ks.{uuid.uuid4().hex[:10]}"
    admin = kafka_admin(settings)
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=20)
    return topic


def _produce(settings: Settings, topic: str, count: int, first: int = 0) -> None:
    producer = Producer({**kafka_config(settings), "enable.idempotence": True,
                         "linger.ms": 20})
    for i in range(first, first + count):
        producer.produce(topic, key=f"k{i % 11}".encode(), value=f"value-{i}".encode(),
                         headers=[("source", b"test")])
    assert producer.flush(30) == 0


def _stream(spark: SparkSession, settings: Settings, checkpoint: Path, **options: str):
    reader = (spark.readStream.format("lakehouse_kafka")
              .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers)
              .option("checkpointLocation", str(checkpoint)))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _run_available_now(spark: SparkSession, df, name: str, checkpoint: Path) -> StreamingQuery:
    query = (df.writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    return query


def _values(spark: SparkSession, name: str) -> list[str]:
    return [r.v for r in spark.sql(f"SELECT CAST(value AS STRING) v FROM {name}").collect()]


def test_reads_every_record_with_the_kafka_schema(
    stack: Stack, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    topic = _topic(settings)
    _produce(settings, topic, 900)
    df = _stream(spark, settings, tmp_path / "cp", subscribe=topic, startingOffsets="earliest")
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    _run_available_now(spark, df, "ks_all", tmp_path / "cp")
    rows = spark.sql("SELECT * FROM ks_all").collect()
    assert len(rows) == 900
    assert len({(r.partition, r.offset) for r in rows}) == 900
    assert sorted(_values(spark, "ks_all")) == sorted(f"value-{i}" for i in range(900))
    assert {r.topic for r in rows} == {topic}
    assert rows[0].headers[0].key == "source" and bytes(rows[0].headers[0].value) == b"test"
    assert all(r.timestampType == 0 and r.timestamp is not None for r in rows)


def test_transactions_aborted_records_are_never_read(
    stack: Stack, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    """Kafka Connect writes its source topics in transactions: records of an aborted
    transaction stay invisible and the offsets their markers take are skipped."""
    topic = _topic(settings, partitions=1)
    produce_transactions(settings, topic, ["commit", "abort", "commit"], 50)
    df = _stream(spark, settings, tmp_path / "cp", subscribe=topic, startingOffsets="earliest")
    _run_available_now(spark, df, "ks_txn", tmp_path / "cp")
    values = _values(spark, "ks_txn")
    assert len(values) == 100
    assert all(value.startswith("commit-") for value in values)


def test_starting_offsets_latest_and_per_partition(
    stack: Stack, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    topic = _topic(settings, partitions=2)
    _produce(settings, topic, 200)
    # per-partition JSON: partition 0 from offset 10, partition 1 from the end (-1)
    starting = json.dumps({topic: {"0": 10, "1": -1}})
    df = _stream(spark, settings, tmp_path / "json", subscribe=topic, startingOffsets=starting)
    _run_available_now(spark, df, "ks_json", tmp_path / "json")
    rows = spark.sql("SELECT partition, offset FROM ks_json").collect()
    assert rows and {r.partition for r in rows} == {0}
    assert min(r.offset for r in rows) == 10
    # latest: nothing that was already there is read; what comes after is
    df = _stream(spark, settings, tmp_path / "latest", subscribe=topic,
                 startingOffsets="latest")
    query = (df.writeStream.format("memory").queryName("ks_latest")
             .option("checkpointLocation", str(tmp_path / "latest"))
             .trigger(processingTime="1 second").start())
    try:
        _wait(lambda: query.lastProgress is not None, 60)
        _produce(settings, topic, 50, first=1000)
        _wait(lambda: spark.sql("SELECT count(*) c FROM ks_latest").first().c >= 50, 60)
    finally:
        query.stop()
    assert sorted(_values(spark, "ks_latest")) == sorted(f"value-{i}" for i in range(1000, 1050))


def test_per_trigger_cap_is_honoured(
    stack: Stack, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    topic = _topic(settings, partitions=3)
    _produce(settings, topic, 1000)
    df = _stream(spark, settings, tmp_path / "cap", subscribe=topic, startingOffsets="earliest",
                 maxOffsetsPerTrigger="300")
    query = (df.writeStream.format("memory").queryName("ks_cap")
             .option("checkpointLocation", str(tmp_path / "cap"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        _wait(lambda: spark.sql("SELECT count(*) c FROM ks_cap").first().c >= 1000, 120)
    finally:
        query.stop()
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    batches = spark.sql("SELECT count(*) c FROM ks_cap").first().c
    assert batches == 1000
    assert len(sizes) >= 4 and max(sizes) <= 300, sizes


def test_pattern_picks_up_new_topics(
    stack: Stack, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = _topic(settings, partitions=1, name=f"{prefix}.a")
    _produce(settings, first, 20)
    df = _stream(spark, settings, tmp_path / "pat", subscribePattern=rf"{prefix}\..*",
                 startingOffsets="earliest")
    query = (df.writeStream.format("memory").queryName("ks_pattern")
             .option("checkpointLocation", str(tmp_path / "pat"))
             .trigger(processingTime="1 second").start())
    try:
        _wait(lambda: spark.sql("SELECT count(*) c FROM ks_pattern").first().c >= 20, 60)
        second = _topic(settings, partitions=2, name=f"{prefix}.b")
        _produce(settings, second, 30, first=100)
        _wait(lambda: spark.sql("SELECT count(*) c FROM ks_pattern").first().c >= 50, 60)
    finally:
        query.stop()
    topics = {r.topic for r in spark.sql("SELECT DISTINCT topic FROM ks_pattern").collect()}
    assert topics == {first, second}
    assert spark.sql("SELECT count(*) c FROM ks_pattern").first().c == 50


def _run_collecting(df, checkpoint: Path) -> tuple[list[str], StreamingQuery]:
    """availableNow into a foreachBatch sink (which, unlike memory, resumes a checkpoint)."""
    seen: list[str] = []

    def collect(batch, _batch_id: int) -> None:
        seen.extend(r.v for r in batch.selectExpr("CAST(value AS STRING) v").collect())

    query = (df.writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    with contextlib.suppress(StreamingQueryException):  # inspected through query.exception()
        query.awaitTermination(180)
    return seen, query


def test_truncated_offsets_fail_or_are_skipped_and_counted(
    stack: Stack, settings: Settings, spark: SparkSession, tmp_path: Path
) -> None:
    topic = _topic(settings, partitions=1)
    _produce(settings, topic, 100)
    checkpoint = tmp_path / "cp"
    df = _stream(spark, settings, checkpoint, subscribe=topic, startingOffsets="earliest")
    seen, _ = _run_collecting(df, checkpoint)
    assert len(seen) == 100
    # the log is truncated: the topic is deleted and re-created with fewer records
    admin = kafka_admin(settings)
    admin.delete_topics([topic])[topic].result(timeout=20)
    _wait(lambda: topic not in kafka_admin(settings).list_topics(timeout=5).topics, 30)
    _topic(settings, partitions=1, name=topic)
    _produce(settings, topic, 40, first=500)

    df = _stream(spark, settings, checkpoint, subscribe=topic, startingOffsets="earliest")
    seen, query = _run_collecting(df, checkpoint)
    error = query.exception()
    assert error is not None, "the query should fail on lost offsets"
    text = str(error)
    assert f"topic {topic} partition 0: offsets [40, 100) are no longer available" in text
    assert "failOnDataLoss=false" in text
    assert seen == []

    report = tmp_path / "losses.jsonl"
    df = _stream(spark, settings, checkpoint, subscribe=topic, startingOffsets="earliest",
                 failOnDataLoss="false", lossReportPath=str(report))
    seen, query = _run_collecting(df, checkpoint)
    assert query.exception() is None
    assert sorted(seen) == sorted(f"value-{i}" for i in range(500, 540))
    losses = [json.loads(line) for line in report.read_text().splitlines()]
    assert losses and losses[0]["topic"] == topic and losses[0]["skipped"] == 60


def test_options_are_checked(spark: SparkSession, settings: Settings) -> None:
    df = (spark.readStream.format("lakehouse_kafka")
          .option("kafka.bootstrap.servers", settings.kafka.bootstrap_servers).load())
    with pytest.raises(Exception, match="exactly one of the options subscribe"):
        df.writeStream.format("memory").queryName("ks_bad").start().awaitTermination(30)


# -- offset planning (pure functions) ------------------------------------------------------


def test_cap_is_shared_in_proportion_and_never_exceeded() -> None:
    start = {"t": {"0": 0, "1": 100, "2": 50}}
    latest = {"t": {"0": 600, "1": 400, "2": 50}}
    capped = apply_cap(start, latest, 300)
    taken = sum(capped["t"][p] - start["t"][p] for p in start["t"])
    assert taken == 300
    assert capped["t"]["0"] - 0 == 200 and capped["t"]["1"] - 100 == 100
    assert capped["t"]["2"] == 50
    assert apply_cap(start, latest, 10_000) == latest


def test_new_partitions_start_at_earliest_and_gaps_are_reported() -> None:
    start = {"t": {"0": 5, "1": 2}}
    end = {"t": {"0": 10, "1": 8, "2": 4}}
    earliest = {"t": {"0": 0, "1": 3, "2": 1}}
    ranges, losses = plan_ranges(start, end, earliest)
    assert ranges == [("t", 0, 5, 10), ("t", 1, 3, 8), ("t", 2, 1, 4)]
    assert [(x.partition, x.lost_from, x.lost_to) for x in losses] == [(1, 2, 3)]


def _wait(check, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"condition not met within {timeout} s")
