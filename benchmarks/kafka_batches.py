"""What the one-process baseline of the bronze benchmarks needs from Kafka: log ranges per
partition, and consumed records as Arrow batches in bronze's column layout."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    TopicPartition,
)

from clients import kafka_admin, kafka_config
from settings import Settings

_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
# bronze's columns before ingested_at (spark_streaming/bronze.py)
BRONZE_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("headers", pa.list_(_HEADER)),
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
    ("kafka_timestamp", pa.timestamp("us", tz="UTC")), ("kafka_timestamp_type", pa.int32()),
])
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}


def watermarks(settings: Settings, topic: str) -> dict[int, tuple[int, int]]:
    """(earliest, end) offsets of each partition of `topic`."""
    partitions = kafka_admin(settings).list_topics(topic, timeout=20).topics[topic].partitions
    consumer = Consumer({**kafka_config(settings), "group.id": "bench-watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=20)
                for p in partitions}
    finally:
        consumer.close()


class RecordColumns:
    """Consumed records of one partition, turned into one Arrow batch at a time."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    def __len__(self) -> int:
        return len(self.messages)

    def add(self, message: Any) -> None:
        self.messages.append(message)

    def to_batch(self, topic: str, partition: int) -> pa.RecordBatch:
        messages = self.messages
        size = len(messages)
        stamps = [m.timestamp() for m in messages]
        headers = [[{"key": k, "value": v} for k, v in (m.headers() or [])] for m in messages]
        return pa.RecordBatch.from_arrays([
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            pa.array(headers, pa.list_(_HEADER)),
            pa.array([topic] * size, pa.string()),
            pa.array([partition] * size, pa.int32()),
            pa.array([m.offset() for m in messages], pa.int64()),
            pa.array([ms * 1000 if kind in _TIMESTAMP_TYPES else None for kind, ms in stamps],
                     pa.timestamp("us", tz="UTC")),
            pa.array([_TIMESTAMP_TYPES.get(kind, -1) for kind, _ in stamps], pa.int32()),
        ], schema=BRONZE_SCHEMA)
