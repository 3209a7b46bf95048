"""`lakehouse kafka topics | groups | consume | produce` against the real broker.

Every test makes its own topics (a fresh name per run) and groups, so tests do not depend
on each other or on what earlier sessions left on the broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from clients import kafka_admin, kafka_config
from connectors.connect_client import ConnectClient
from connectors.kafka_acls import WRITE, allow_topics
from infra.stack import Stack
from settings import Settings
from tests.conftest import PROJECT_DIR, TEST_PROFILE, invoke_cli

pytestmark = pytest.mark.stack

RUN = uuid.uuid4().hex[:8]


def _until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `condition` until it returns something truthy; fail naming `what` past the
    deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.2)


@pytest.fixture()
def new_topic(stack: Stack, settings: Settings) -> Iterator[Callable[..., tuple[str, str]]]:
    """Create a topic of this run: returns (short name, full name); deleted afterwards."""
    admin = kafka_admin(settings)
    made: list[str] = []

    def create(partitions: int, configs: dict[str, str] | None = None) -> tuple[str, str]:
        short = f"kops_{RUN}_{len(made)}_{uuid.uuid4().hex[:4]}"
        full = settings.kafka.topic_prefix + short
        admin.create_topics([NewTopic(full, partitions, 1, config=configs or {})])[full].result(30)
        made.append(full)
        _until(lambda: len(_ends(settings, full)) == partitions, 30, f"{full} has leaders")
        return short, full

    yield create
    if made:
        for future in admin.delete_topics(made).values():
            future.result(30)


def _ends(settings: Settings, topic: str) -> dict[int, int]:
    """Each partition's end offset; {} while the topic's partitions have no leader yet."""
    consumer = Consumer({**kafka_config(settings), "group.id": "kops-probe"})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return {}
        ends = {}
        for p in metadata.partitions:
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        return ends
    except KafkaException:  # a partition still electing its leader: ask again
        return {}
    finally:
        consumer.close()


def _produce(settings: Settings, topic: str, partitions: int, count: int,
             tag: str = "v") -> list[str]:
    """`count` records spread round-robin over the partitions; returns their values."""
    producer = Producer({**kafka_config(settings), "enable.idempotence": True})
    values = [f"{tag}-{i}" for i in range(count)]
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value.encode(),
                         partition=i % partitions, headers=[("origin", b"test")])
    assert producer.flush(30) == 0
    return values


def _group_consumer(settings: Settings, group: str) -> Consumer:
    return Consumer({**kafka_config(settings), "group.id": group,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def _groups(*names: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = invoke_cli("kafka", "groups", *names, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _group(report: dict[str, Any], name: str) -> dict[str, Any]:
    [group] = [g for g in report["groups"] if g["group"] == name]
    return group


def _run_with_stdin(text: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`lakehouse --profile test ARGS` with `text` on stdin (run_cli gives no stdin)."""
    command = [sys.executable, "-m", "cli.main", "--profile", TEST_PROFILE, *args]
    return subprocess.run(command, cwd=PROJECT_DIR, input=text, text=True,
                          capture_output=True, timeout=60, env=dict(os.environ), check=False)


def test_two_consumers_of_a_group_split_the_partitions_and_another_group_replays(
    settings: Settings, new_topic: Callable[..., tuple[str, str]]
) -> None:
    short, topic = new_topic(3)
    group = f"kops-split-{RUN}"
    consumers = [_group_consumer(settings, group) for _ in range(2)]
    try:
        for consumer in consumers:
            consumer.subscribe([topic])

        def split() -> bool:  # polling drives the join; nothing is produced yet
            for consumer in consumers:
                assert consumer.poll(0.2) is None
            owned = [{tp.partition for tp in c.assignment()} for c in consumers]
            return all(owned) and not owned[0] & owned[1] and len(owned[0] | owned[1]) == 3

        _until(split, 45, "both consumers hold partitions of the 3")
        values = _produce(settings, topic, 3, 30)
        received: list[list[Message]] = [[], []]

        def all_read() -> bool:
            for consumer, got in zip(consumers, received, strict=True):
                message = consumer.poll(0.2)
                if message is not None:
                    assert message.error() is None, message.error()
                    got.append(message)
            return sum(map(len, received)) >= len(values)

        _until(all_read, 30, "the group read every record")
        for consumer in consumers:
            consumer.commit(asynchronous=False)
    finally:
        for consumer in consumers:
            consumer.close()

    partitions = [{m.partition() for m in got} for got in received]
    assert all(partitions) and not partitions[0] & partitions[1], partitions
    read = [m.value().decode() for got in received for m in got]
    assert sorted(read) == sorted(values)  # together every record, none twice

    # Another group starts from the beginning on its own: every record again.
    replay = invoke_cli("kafka", "consume", short, "--group", f"kops-replay-{RUN}",
                     "--from-beginning", "--max-messages", "30", "--timeout", "20")
    assert replay.returncode == 0, replay.stderr
    assert sorted(r["value"] for r in _lines(replay.stdout)) == sorted(values)
    report = _groups(group, f"kops-replay-{RUN}")
    assert _group(report, group)["lag"] == 0
    assert sum(p["position"] for p in _group(report, group)["partitions"]) == 30
    assert _group(report, f"kops-replay-{RUN}")["lag"] == 0


def test_groups_shows_lag_then_zero_after_consuming(
    settings: Settings, new_topic: Callable[..., tuple[str, str]]
) -> None:
    short, topic = new_topic(3)
    group = f"kops-lag-{RUN}"
    first = _produce(settings, topic, 3, 12, tag="first")
    consumer = _group_consumer(settings, group)
    consumer.subscribe([topic])
    got: list[Message] = []

    def read_all() -> bool:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            got.append(message)
        return len(got) >= len(first)

    try:
        _until(read_all, 30, "the first records read")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    _produce(settings, topic, 3, 9, tag="second")

    behind = _group(_groups(group), group)
    assert behind["lag"] == 9
    assert {(p["partition"], p["position"], p["log_end"], p["lag"])
            for p in behind["partitions"]} == {(0, 4, 7, 3), (1, 4, 7, 3), (2, 4, 7, 3)}

    caught = invoke_cli("kafka", "consume", short, "--group", group, "--max-messages", "9",
                     "--timeout", "20")
    assert caught.returncode == 0, caught.stderr
    assert sorted(r["value"] for r in _lines(caught.stdout)) == sorted(
        f"second-{i}" for i in range(9))
    _until(lambda: _group(_groups(group), group)["lag"] == 0, 20, "the group's lag is 0")


def test_consume_from_beginning_returns_the_records_and_commits_nothing(
    settings: Settings, new_topic: Callable[..., tuple[str, str]]
) -> None:
    short, topic = new_topic(2)
    values = _produce(settings, topic, 2, 6)
    result = invoke_cli("kafka", "consume", topic, "--from-beginning", "--max-messages", "6",
                     "--timeout", "20", "--headers")
    assert result.returncode == 0, result.stderr
    records = _lines(result.stdout)
    assert sorted(r["value"] for r in records) == sorted(values)
    assert {(r["key"], r["value"]) for r in records} == {(f"k{i}", v)
                                                         for i, v in enumerate(values)}
    assert all(r["topic"] == topic and r["headers"] == [["origin", "test"]] for r in records)
    assert all(isinstance(r["timestamp"], int) for r in records)

    one = invoke_cli("kafka", "consume", short, "--partition", "1", "--offset", "1",
                  "--max-messages", "2", "--timeout", "20")
    assert one.returncode == 0, one.stderr
    assert [(r["partition"], r["offset"], r["value"]) for r in _lines(one.stdout)] == [
        (1, 1, "v-3"), (1, 2, "v-5")]
    # Looking at a topic without --group leaves no group behind.
    assert not [g for g in _groups()["groups"] if g["group"].startswith("lakehouse-kafka")]


def test_produce_writes_each_stdin_line_and_fails_on_bad_lines(
    settings: Settings, new_topic: Callable[..., tuple[str, str]]
) -> None:
    short, topic = new_topic(3)
    lines = "".join(f"station-{i}\t{{\"n\": {i}}}\n" for i in range(25))
    result = _run_with_stdin(lines, "kafka", "produce", short, "--key-separator", "\\t")
    assert result.returncode == 0, result.stderr
    assert f"25 of 25 record(s) delivered to {topic}" in result.stderr
    assert sum(_ends(settings, topic).values()) == 25

    bad = _run_with_stdin("a\tone\nno separator\nb\ttwo\n", "kafka", "produce", short,
                          "--key-separator", "\\t", "--acks", "1", "--no-idempotence")
    assert bad.returncode == 1, bad.stderr
    assert "2 of 3 record(s) delivered" in bad.stderr and "1 failed" in bad.stderr
    assert sum(_ends(settings, topic).values()) == 27

    keyed = invoke_cli("kafka", "consume", short, "--from-beginning", "--max-messages", "27",
                    "--timeout", "20")
    pairs = {(r["key"], r["value"]) for r in _lines(keyed.stdout)}
    assert ("station-7", '{"n": 7}') in pairs and ("b", "two") in pairs

    refused = _run_with_stdin("x\n", "kafka", "produce", "--acks", "0", short)
    assert refused.returncode == 2 and "--no-idempotence" in refused.stderr


def test_topics_describes_partitions_leaders_isr_configs_and_offsets(
    settings: Settings, new_topic: Callable[..., tuple[str, str]]
) -> None:
    short, topic = new_topic(3, {"retention.ms": "3600000"})
    _produce(settings, topic, 3, 5)
    result = invoke_cli("kafka", "topics", short, "--json")
    assert result.returncode == 0, result.stderr
    [described] = json.loads(result.stdout)
    assert described["topic"] == topic and described["declared"] is None
    assert described["configs"]["retention.ms"] == "3600000"
    partitions = described["partitions"]
    assert [p["partition"] for p in partitions] == [0, 1, 2]
    for p in partitions:
        assert p["leader"] is not None and p["replicas"] == [p["leader"]]
        assert p["isr"] == p["replicas"] and p["earliest"] == 0
    assert [p["end"] for p in partitions] == [2, 2, 1]

    text = invoke_cli("kafka", "topics")
    assert text.returncode == 0, text.stderr
    assert f"Topic: {topic}  PartitionCount: 3  ReplicationFactor: 1" in text.stdout
    assert "Isr: " in text.stdout and "Offsets: 0..2" in text.stdout
    assert "__consumer_offsets" not in text.stdout
    missing = invoke_cli("kafka", "topics", f"no_such_topic_{RUN}")
    assert missing.returncode == 1 and "no_such_topic" in missing.stderr


def test_groups_shows_a_spark_checkpoint_position_as_a_pseudo_group(
    settings: Settings, new_topic: Callable[..., tuple[str, str]], tmp_path: Path
) -> None:
    _short, topic = new_topic(2)
    _produce(settings, topic, 2, 5)  # partition 0: 3 records, partition 1: 2
    # A checkpoint laid out as Spark 4 writes one: offsets/<batch> ("v1", the batch's
    # metadata, one line per source) and commits/<batch> once the batch is done.
    done = tmp_path / "bronze_done"
    (done / "offsets").mkdir(parents=True)
    (done / "commits").mkdir()
    (done / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
        + json.dumps({topic: {"0": 3, "1": 0}}))
    (done / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    running = tmp_path / "bronze_running"
    (running / "offsets").mkdir(parents=True)
    (running / "offsets" / "0").write_text((done / "offsets" / "0").read_text())

    env = {"LAKEHOUSE_LAKEHOUSE__CHECKPOINT_DIR": str(tmp_path)}
    report = _groups("spark:bronze_done", "spark:bronze_running", env=env)
    spark = _group(report, "spark:bronze_done")
    assert spark["kind"] == "spark" and spark["state"] == "behind" and spark["lag"] == 2
    assert [(p["partition"], p["position"], p["log_end"], p["lag"])
            for p in spark["partitions"]] == [(0, 3, 3, 0), (1, 0, 2, 2)]
    assert _group(report, "spark:bronze_running")["state"] == "no finished batch"


def test_groups_shows_a_connect_source_connectors_offsets(
    settings: Settings, new_topic: Callable[..., tuple[str, str]], tmp_path: Path
) -> None:
    _short, topic = new_topic(1)
    allow_topics(settings, "connect", [topic], WRITE)  # the worker writes it
    name = f"kops-file-{RUN}"
    source = settings.connect_file_path / "tests" / f"{name}.txt"  # where connectors may read
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text("one\ntwo\nthree\n")
    with ConnectClient.of(settings) as client:
        client.put_config(name, {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source), "topic": topic,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter"})
        try:
            size = source.stat().st_size

            def progress() -> dict[str, Any] | None:
                result = invoke_cli("kafka", "groups", f"connect:{name}", "--json")
                if result.returncode != 0 and "no such group" in result.stderr:
                    return None  # the worker has not listed the new connector yet
                assert result.returncode == 0, result.stderr
                found = [c for c in json.loads(result.stdout)["connectors"]
                         if c["offsets"] and c["offsets"][0]["offset"]["position"] == size]
                return found[0] if found else None

            connector = _until(progress, 40, f"{name} reports source offsets")
            assert connector["state"] == "running"
            assert connector["offsets"] == [{"partition": {"filename": str(source)},
                                             "offset": {"position": size}}]
        finally:
            client.delete(name)
