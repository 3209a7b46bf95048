"""Kafka helpers shared by the broker and Spark source tests."""

from __future__ import annotations

from confluent_kafka import Producer

from infra.clients import kafka_config
from settings import Settings


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
