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

# Spark's Kafka source: -1 no timestamp, 0 CreateTime, 1 LogAppendTime.
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}


class OffsetRange(InputPartition):
    """Offsets [start, end) of one topic partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class _Columns:
    """Column buffers for one Arrow batch."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, message: Any) -> None:
        self.keys.append(message.key())
        self.values.append(message.value())
        self.offsets.append(message.offset())
        kind, millis = message.timestamp()
        self.timestamps.append(millis * 1000 if kind in _TIMESTAMP_TYPES else None)
        self.timestamp_types.append(_TIMESTAMP_TYPES.get(kind, -1))
        headers = message.headers()
        self.headers.append([(k, v) for k, v in headers] if headers else [])

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        size = len(self)
        return pa.RecordBatch.from_arrays([
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([topic] * size, pa.string()),
            pa.array([partition] * size, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(self.timestamp_types, pa.int32()),
            pa.array([[{"key": k, "value": v} for k, v in h] for h in self.headers],
                     ARROW_SCHEMA.field("headers").type),
        ], schema=ARROW_SCHEMA)


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
            messages = consumer.consume(num_messages=min(batch_rows, 10000), timeout=0.5)
            if not messages:
                if (time.monotonic() - idle_since) * 1000 > poll_timeout_ms:
                    raise TimeoutError(
                        f"no records from topic {topic} partition {partition} for "
                        f"{poll_timeout_ms} ms; expected offsets up to {last_wanted}")
                continue
            idle_since = time.monotonic()
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        done = True
                        break
                    raise RuntimeError(f"reading topic {topic} partition {partition} at "
                                       f"offset {offset_range.start}+: {error}")
                if message.offset() > last_wanted:
                    done = True
                    break
                columns.add(message)
                if message.offset() == last_wanted:
                    done = True
                    break
            if len(columns) >= batch_rows or (done and len(columns)):
                yield columns.to_batch(topic, partition)
                columns = _Columns()
    finally:
        consumer.close()
