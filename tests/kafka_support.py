"""Kafka helpers shared by the broker and Spark source tests."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Message, Producer, TopicPartition

from clients import kafka_config
from settings import Settings
from spark_streaming.bronze import log_ends


def produce_transactions(settings: Settings, topic: str, outcomes: list[str],
                         per_transaction: int) -> None:
    """One transaction per outcome ("commit" or "abort") of records `<outcome>-<i>`, each
    flushed to the log before it ends (an abort would otherwise purge them unsent)."""
    producer = Producer({**kafka_config(settings), "transactional.id": f"t-{topic}"})
    producer.init_transactions(30)
    for outcome in outcomes:
        producer.begin_transaction()
        for i in range(per_transaction):
            producer.produce(topic, key=b"k", value=f"{outcome}-{i}".encode())
        assert producer.flush(30) == 0
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def read_to_end(settings: Settings, topic: str, deadline_seconds: float = 120) -> list[Message]:
    """Every committed record of `topic` from the beginning, read until each partition's
    position reaches its last stable offset as it was when the call began (for a topic
    nothing writes to any more: all of it, without waiting for quiet)."""
    ends = log_ends(settings, topic)
    consumer = Consumer({**kafka_config(settings), "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    messages: list[Message] = []
    deadline = time.monotonic() + deadline_seconds
    try:
        while True:
            for message in consumer.consume(1000, timeout=0.5):
                assert message.error() is None, message.error()
                messages.append(message)
            reached = {tp.partition: tp.offset for tp in
                       consumer.position([TopicPartition(topic, p) for p in ends])}
            if all(reached[p] >= end for p, end in ends.items() if end > 0):
                return messages
            assert time.monotonic() < deadline, f"{topic}: read to {reached} of {ends}"
    finally:
        consumer.close()
