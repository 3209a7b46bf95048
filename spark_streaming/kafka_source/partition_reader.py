"""Executor side: read one offset range of one partition into Arrow record batches."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    TopicPartition,
)
from pyspark.sql.datasource import InputPartition

from spark_streaming.kafka_source.schema import ARROW_SCHEMA

PARTITION_FETCH_BYTES = 16 * 2**20

# Spark's Kafka source: -1 no timestamp, 0 CreateTime, 1 LogAppendTime.
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}


class OffsetRange(InputPartition):
    """Offsets [start, end) of one topic partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class _Columns:
    """Column buffers for one Arrow batch, filled a consume() call at a time."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    def __len__(self) -> int:
        return len(self.messages)

    def add(self, message: Any) -> None:
        self.messages.append(message)

    def extend(self, messages: list[Any]) -> None:
        self.messages.extend(messages)

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        messages = self.messages
        size = len(messages)
        stamps = [m.timestamp() for m in messages]
        headers = [m.headers() for m in messages]
        header_type = ARROW_SCHEMA.field("headers").type
        if any(headers):
            header_column = pa.array(
                [[{"key": k, "value": v} for k, v in h] if h else [] for h in headers],
                header_type)
        else:  # the common case: no headers at all, no per-record Python objects
            header_column = pa.ListArray.from_arrays(
                pa.array([0] * (size + 1), pa.int32()), pa.array([], header_type.value_type))
        return pa.RecordBatch.from_arrays([
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            pa.array([topic] * size, pa.string()),
            pa.array([partition] * size, pa.int32()),
            pa.array([m.offset() for m in messages], pa.int64()),
            pa.array([ms * 1000 if kind in _TIMESTAMP_TYPES else None for kind, ms in stamps],
                     pa.timestamp("us", tz="UTC")),
            pa.array([_TIMESTAMP_TYPES.get(kind, -1) for kind, _ in stamps], pa.int32()),
            header_column,
        ], schema=ARROW_SCHEMA)


def _within_range(messages: list[Any], last_wanted: int, topic: str,
                  partition: int) -> tuple[list[Any], bool]:
    """The records of `messages` up to `last_wanted`, and whether the range is complete."""
    last = messages[-1]
    plain_run = last.error() is None and last.offset() < last_wanted
    if plain_run and all(m.error() is None for m in messages):  # fast path
        return messages, False
    kept = []
    for message in messages:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return kept, True
            raise RuntimeError(f"reading topic {topic} partition {partition}: {error}")
        if message.offset() > last_wanted:
            return kept, True
        kept.append(message)
        if message.offset() == last_wanted:
            return kept, True
    return kept, False


def read_range(
    offset_range: OffsetRange,
    consumer_conf: dict[str, Any],
    batch_rows: int,
    poll_timeout_ms: int,
) -> Iterator[pa.RecordBatch]:
    """Records [start, end) of one partition, in batches of at most `batch_rows`.

    Stops early at the end of the partition: offsets can be missing at the tail
    (transaction markers, compaction), so "end" is an upper bound, not a count.
    """
    consumer = Consumer({
        # one partition per consumer: fetch more of it per round trip than the 1 MB default
        # (the user's `kafka.max.partition.fetch.bytes` still wins)
        "max.partition.fetch.bytes": PARTITION_FETCH_BYTES,
        **consumer_conf,
        "group.id": consumer_conf.get("group.id", "lakehouse-spark-reader"),
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "error",
    })
    topic, partition = offset_range.topic, offset_range.partition
    last_wanted = offset_range.end - 1
    try:
        consumer.assign([TopicPartition(topic, partition, offset_range.start)])
        columns = _Columns()
        idle_since = time.monotonic()
        done = False
        while not done:
            messages = consumer.consume(num_messages=min(batch_rows, 50000), timeout=0.5)
            if not messages:
                if (time.monotonic() - idle_since) * 1000 > poll_timeout_ms:
                    raise TimeoutError(
                        f"no records from topic {topic} partition {partition} for "
                        f"{poll_timeout_ms} ms; expected offsets up to {last_wanted}")
                continue
            idle_since = time.monotonic()
            kept, done = _within_range(messages, last_wanted, topic, partition)
            columns.extend(kept)
            if len(columns) >= batch_rows or (done and len(columns)):
                yield columns.to_batch(topic, partition)
                columns = _Columns()
    finally:
        consumer.close()
