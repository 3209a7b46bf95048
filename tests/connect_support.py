"""Helpers for tests of Kafka Connect connectors: per-test connector files, topic reading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from clients import kafka_config
from connectors.connect_client import ConnectClient
from connectors.connect_config import CONNECTORS_DIR
from connectors.kafka_acls import WRITE, allow_topics
from settings import Settings

PROJECT_DIR = Path(__file__).resolve().parents[1]


def cli_with_input(*args: str, stdin: str = "", timeout: float = 120,
                   profile: str = "test") -> subprocess.CompletedProcess[str]:
    """`lakehouse --profile test ARGS` with `stdin` as its input (answers to prompts)."""
    return subprocess.run([sys.executable, "-m", "cli.main", "--profile", profile, *args],
                          input=stdin, capture_output=True, text=True, timeout=timeout,
                          cwd=PROJECT_DIR, env=dict(os.environ), check=False)


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def repo_connector(file_name: str) -> dict[str, Any]:
    """A connector file of the repository, as a JSON document (placeholders unresolved)."""
    return json.loads((CONNECTORS_DIR / file_name).read_text())


def make_topic(settings: Settings, topic: str, partitions: int = 1) -> str:
    """Create a test connector's topic (the broker and the worker create none by
    themselves) and let the worker write it (kafka.auth); one that exists already is fine."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from clients import kafka_admin

    admin = kafka_admin(settings)  # held until the answer: a dropped client cancels it
    future = admin.create_topics([NewTopic(topic, partitions, 1)])[topic]
    try:
        future.result(30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
    allow_topics(settings, "connect", [topic], WRITE)
    return topic


def make_connector_topics(settings: Settings, path: Path) -> list[str]:
    """Create every topic a test's connector file writes (its `topic`, Debezium's table
    and heartbeat topics), as an operator does before applying a connector that writes
    topics no file in connectors/topics/ declares."""
    from connectors.connect_config import load_connector_file
    from connectors.topic_producers import connector_topics

    topics = list(connector_topics(load_connector_file(path, settings)))
    for topic in topics:
        make_topic(settings, topic)
    return topics


def write_connector(folder: Path, document: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{document['name']}.json"
    path.write_text(json.dumps(document, indent=2))
    return path


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None


def read_topic(settings: Settings, topic: str, expected: int | Callable[[list[Record]], bool],
               timeout: float = 90, quiet: float = 3.0) -> list[Record]:
    """Every record of partition 0, from the beginning, by assignment (no group join).

    Reads until `expected` is met (a record count, or a test of the records so far) and
    then nothing more came for `quiet` seconds, so duplicates after the expected records
    are seen too.
    """
    def enough(records: list[Record]) -> bool:
        return expected(records) if callable(expected) else len(records) >= expected

    consumer = Consumer({**kafka_config(settings), "group.id": unique("test-read-"),
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    last_arrival = time.monotonic()
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.3)
            if message is not None and not message.error():
                records.append(Record(message.offset(), message.key(), message.value()))
                last_arrival = time.monotonic()
                continue
            if enough(records) and time.monotonic() - last_arrival >= quiet:
                break
    finally:
        consumer.close()
    return records


def delete_connector(client: ConnectClient, name: str) -> None:
    """Delete and wait until the worker no longer lists it (tasks stopped)."""
    client.delete(name)
    deadline = time.monotonic() + 30
    while name in client.connector_names() and time.monotonic() < deadline:
        time.sleep(0.3)
