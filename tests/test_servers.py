"""Each embedded server does its job: S3 with auth, a durable broker, Connect, PostgreSQL."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from clients import connect_get, kafka_admin, kafka_config, postgres_connect, s3_client
from connectors.kafka_acls import WRITE, allow_topics
from infra.stack import Stack
from settings import Settings
from tests.jvm_versions import KAFKA_VERSION
from tests.kafka_support import produce_transactions

# -- S3 (MinIO) -------------------------------------------------------------------------


def test_s3_rejects_a_wrong_key(stack: Stack, settings: Settings) -> None:
    access_key, _ = settings.s3.credentials()
    intruder = s3_client(settings, access_key=access_key, secret_key="not-the-secret")
    with pytest.raises(ClientError) as caught:
        intruder.list_objects_v2(Bucket=settings.s3.bucket)
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    unknown = s3_client(settings, access_key="nobody", secret_key="nothing")
    with pytest.raises(ClientError):
        unknown.put_object(Bucket=settings.s3.bucket, Key="x", Body=b"x")


def test_s3_put_get_list_on_the_bucket(stack: Stack, settings: Settings) -> None:
    client = s3_client(settings)
    prefix = f"tests/{uuid.uuid4().hex}/"
    bodies = {f"{prefix}part-{i}.bin": bytes([i]) * (1000 + i) for i in range(3)}
    for key, body in bodies.items():
        client.put_object(Bucket=settings.s3.bucket, Key=key, Body=body)
    listed = client.list_objects_v2(Bucket=settings.s3.bucket, Prefix=prefix)
    assert sorted(o["Key"] for o in listed["Contents"]) == sorted(bodies)
    for key, body in bodies.items():
        assert client.get_object(Bucket=settings.s3.bucket, Key=key)["Body"].read() == body
    ranged = client.get_object(Bucket=settings.s3.bucket, Key=f"{prefix}part-2.bin",
                               Range="bytes=10-19")
    assert ranged["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert ranged["Body"].read() == bytes([2]) * 10


# -- Kafka broker (Apache Kafka, KRaft) ---------------------------------------------------


def _create_topic(settings: Settings, partitions: int = 3) -> str:
    topic = f"test.{uuid.uuid4().hex[:10]}"
    admin = kafka_admin(settings)  # keep a reference until the future resolves
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout=20)
    return topic


def _read_all(settings: Settings, topic: str, partitions: int, expected: int,
              timeout: float = 30) -> list[tuple[int, bytes, bytes]]:
    """(partition, key, value) of every record, read by assignment from the beginning."""
    consumer = Consumer({**kafka_config(settings), "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            records.append((message.partition(), message.key(), message.value()))
    finally:
        consumer.close()
    return records


def _produce(settings: Settings, topic: str, count: int) -> dict[bytes, bytes]:
    producer = Producer({**kafka_config(settings), "enable.idempotence": True, "acks": "all"})
    failures: list[str] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    sent = {}
    for i in range(count):
        key, value = f"station-{i % 7}".encode(), f"event-{i}".encode()
        sent[value] = key
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert not failures, failures
    return sent


def test_broker_keyed_idempotent_produce_and_consume(stack: Stack, settings: Settings) -> None:
    topic = _create_topic(settings)
    metadata = kafka_admin(settings).list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == 3
    sent = _produce(settings, topic, 200)
    records = _read_all(settings, topic, 3, expected=200)
    assert len(records) == 200
    assert {value: key for _, key, value in records} == sent
    partition_of_key: dict[bytes, set[int]] = {}
    for partition, key, _ in records:
        partition_of_key.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in partition_of_key.values()), partition_of_key


def test_broker_data_survives_a_restart(stack: Stack, settings: Settings) -> None:
    topic = _create_topic(settings, partitions=2)
    sent = _produce(settings, topic, 150)
    kafka = stack.component("kafka")
    assert kafka.stop()
    kafka.start()
    records = _read_all(settings, topic, 2, expected=150)
    assert {value: key for _, key, value in records} == sent
    ends = [_end_offset(settings, topic, p) for p in range(2)]
    assert sum(ends) == 150  # nothing written twice on the way


def _end_offset(settings: Settings, topic: str, partition: int) -> int:
    consumer = Consumer({**kafka_config(settings), "group.id": f"t-{uuid.uuid4().hex}"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


def test_consumer_group_commits_offsets_the_admin_api_reports(
    stack: Stack, settings: Settings
) -> None:
    """A group member reads part of a topic and commits; a second member of the same group
    resumes after the commit, and the committed offsets are what the group reports."""
    topic = _create_topic(settings, partitions=2)
    _produce(settings, topic, 100)
    group = f"test-group-{uuid.uuid4().hex[:8]}"
    conf = {**kafka_config(settings), "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}
    first = Consumer(conf)
    first.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 40 and time.monotonic() < deadline:
        message = first.poll(0.5)
        if message is not None and not message.error():
            seen.append(message.value())
            first.commit(message=message, asynchronous=False)
    first.close()
    assert len(seen) >= 40
    admin = kafka_admin(settings)  # keep a reference until the future resolves
    committed = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(timeout=20)
    offsets = {tp.partition: tp.offset for tp in committed.topic_partitions}
    assert sum(offsets.values()) == len(seen)

    second = Consumer(conf)
    second.subscribe([topic])
    rest: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) + len(rest) < 100 and time.monotonic() < deadline:
        message = second.poll(0.5)
        if message is not None and not message.error():
            rest.append(message.value())
    second.close()
    assert sorted(seen + rest) == sorted(f"event-{i}".encode() for i in range(100))


def test_read_committed_hides_an_aborted_transaction(stack: Stack, settings: Settings) -> None:
    topic = _create_topic(settings, partitions=1)
    produce_transactions(settings, topic, ["commit", "abort", "commit"], 20)
    values = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({**kafka_config(settings), "group.id": f"t-{uuid.uuid4().hex}",
                             "isolation.level": isolation, "enable.partition.eof": True})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                break  # end of partition
            got.append(message.value().decode())
        consumer.close()
        values[isolation] = got
    assert values["read_committed"] == [f"commit-{i}" for i in range(20)] * 2
    assert len(values["read_uncommitted"]) == 60  # the aborted records are in the log


# -- Kafka Connect ----------------------------------------------------------------------


def test_connect_lists_filestream_and_debezium_postgres(stack: Stack, settings: Settings) -> None:
    root = connect_get(settings, "/")
    assert root.status_code == 200 and root.json()["version"] == KAFKA_VERSION
    plugins = {p["class"] for p in connect_get(settings, "/connector-plugins").json()}
    assert "org.apache.kafka.connect.file.FileStreamSourceConnector" in plugins
    assert "io.debezium.connector.postgresql.PostgresConnector" in plugins


def test_filestream_connector_moves_file_lines_into_a_topic(
    stack: Stack, settings: Settings, tmp_path: Path
) -> None:
    import requests

    lines = [f"trip-{i},station-{i % 5},2026-11-0{1 + i % 9}" for i in range(25)]
    name = f"test-filestream-{uuid.uuid4().hex[:6]}"
    source = settings.connect_file_path / "tests" / f"{name}.csv"  # where the worker lets
    source.parent.mkdir(parents=True, exist_ok=True)  # connectors read
    source.write_text("\n".join(lines) + "\n")
    topic = _create_topic(settings, partitions=1)
    allow_topics(settings, "connect", [topic], WRITE)  # the worker writes it
    url = f"{settings.connect.url}/connectors/{name}"
    config = {
        "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "tasks.max": "1",
        "file": str(source),
        "topic": topic,
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    }
    auth = settings.connect.auth()
    response = requests.put(f"{url}/config", json=config, timeout=30, auth=auth)
    assert response.status_code in (200, 201), response.text
    try:
        records = _read_all(settings, topic, 1, expected=len(lines), timeout=60)
        assert [value.decode() for _, _, value in records] == lines
        status = requests.get(f"{url}/status", timeout=10, auth=auth).json()
        assert status["connector"]["state"] == "RUNNING", json.dumps(status)
    finally:
        assert requests.delete(url, timeout=30, auth=auth).status_code in (200, 204)


# -- PostgreSQL -------------------------------------------------------------------------


def test_postgres_has_logical_replication_and_the_database(
    stack: Stack, settings: Settings
) -> None:
    with postgres_connect(settings) as conn:
        assert conn.execute("SHOW wal_level").fetchone()[0] == "logical"
        assert int(conn.execute("SHOW max_replication_slots").fetchone()[0]) >= 1
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
        assert conn.execute("SELECT current_database()").fetchone()[0] == \
            settings.postgres.database
        # a replication slot with pgoutput can be made: what Debezium will do
        slot = f"test_{uuid.uuid4().hex[:8]}"
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
